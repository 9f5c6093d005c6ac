import sys

from elastic_training.cli.main import main

sys.exit(main())
