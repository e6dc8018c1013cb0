import sys
from pathlib import Path

# Test helpers (builders.py) are imported by module name.
sys.path.insert(0, str(Path(__file__).parent))
