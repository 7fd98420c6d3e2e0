import sys

from kgroupd.broker.cli.main import main

sys.exit(main())
