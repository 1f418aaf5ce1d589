import sys
from pathlib import Path

# tracegen lives next to the tests; make it importable without a package __init__.
sys.path.insert(0, str(Path(__file__).parent))
