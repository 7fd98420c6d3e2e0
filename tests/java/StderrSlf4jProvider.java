import java.time.LocalTime;
import java.util.Locale;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

import org.slf4j.ILoggerFactory;
import org.slf4j.IMarkerFactory;
import org.slf4j.Logger;
import org.slf4j.Marker;
import org.slf4j.event.Level;
import org.slf4j.helpers.BasicMarkerFactory;
import org.slf4j.helpers.LegacyAbstractLogger;
import org.slf4j.helpers.MessageFormatter;
import org.slf4j.helpers.NOPMDCAdapter;
import org.slf4j.spi.MDCAdapter;
import org.slf4j.spi.SLF4JServiceProvider;

/**
 * A minimal SLF4J 2 provider that writes kafka-clients' log lines to stderr, so a failing test
 * shows what the Java client complained about. Selected with {@code -Dslf4j.provider=StderrSlf4jProvider};
 * the threshold is {@code -Dkgroupd.log.level=WARN} (TRACE, DEBUG, INFO, WARN, ERROR).
 */
public final class StderrSlf4jProvider implements SLF4JServiceProvider {
    private final IMarkerFactory markers = new BasicMarkerFactory();
    private final MDCAdapter mdc = new NOPMDCAdapter();
    private final ConcurrentMap<String, Logger> loggers = new ConcurrentHashMap<>();
    private final Level threshold =
            Level.valueOf(System.getProperty("kgroupd.log.level", "WARN").toUpperCase(Locale.ROOT));
    private final ILoggerFactory factory =
            name -> loggers.computeIfAbsent(name, n -> new StderrLogger(n, threshold));

    @Override
    public ILoggerFactory getLoggerFactory() {
        return factory;
    }

    @Override
    public IMarkerFactory getMarkerFactory() {
        return markers;
    }

    @Override
    public MDCAdapter getMDCAdapter() {
        return mdc;
    }

    @Override
    public String getRequestedApiVersion() {
        return "2.0.99";
    }

    @Override
    public void initialize() {}

    static final class StderrLogger extends LegacyAbstractLogger {
        private static final long serialVersionUID = 1L;
        private final int threshold;

        StderrLogger(String name, Level threshold) {
            this.name = name;
            this.threshold = threshold.toInt();
        }

        private boolean on(Level level) {
            return level.toInt() >= threshold;
        }

        @Override
        public boolean isTraceEnabled() {
            return on(Level.TRACE);
        }

        @Override
        public boolean isDebugEnabled() {
            return on(Level.DEBUG);
        }

        @Override
        public boolean isInfoEnabled() {
            return on(Level.INFO);
        }

        @Override
        public boolean isWarnEnabled() {
            return on(Level.WARN);
        }

        @Override
        public boolean isErrorEnabled() {
            return on(Level.ERROR);
        }

        @Override
        protected String getFullyQualifiedCallerName() {
            return null;
        }

        @Override
        protected void handleNormalizedLoggingCall(
                Level level, Marker marker, String pattern, Object[] args, Throwable thrown) {
            String message = MessageFormatter.basicArrayFormat(pattern, args);
            String shortName = name.substring(name.lastIndexOf('.') + 1);
            StringBuilder line = new StringBuilder()
                    .append(LocalTime.now()).append(' ')
                    .append(level).append(' ')
                    .append('[').append(Thread.currentThread().getName()).append("] ")
                    .append(shortName).append(": ")
                    .append(message);
            synchronized (System.err) {
                System.err.println(line);
                if (thrown != null) {
                    thrown.printStackTrace(System.err);
                }
            }
        }
    }
}
