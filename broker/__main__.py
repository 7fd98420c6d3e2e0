import sys

from kgroupd.broker.cli import main

sys.exit(main())
