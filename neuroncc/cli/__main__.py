import sys

from neuroncc.cli import main

sys.exit(main())
