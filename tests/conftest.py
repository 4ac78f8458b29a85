import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# No test may reach the real Hub: point HF at a closed local port and isolate every cache.
_tmp = tempfile.mkdtemp(prefix="kvplan-tests-")
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
os.environ["HF_HOME"] = os.path.join(_tmp, "hf")
os.environ["KVPLAN_CACHE"] = os.path.join(_tmp, "kvplan")
os.environ["KVPLAN_HUB_TIMEOUT"] = "3"
os.environ.pop("HF_TOKEN", None)
os.environ.pop("HF_HUB_OFFLINE", None)
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
