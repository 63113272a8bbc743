import sys

from .cli import main
from .runtime.isolation import faults_logged

faults_logged()
sys.exit(main())
