"""snapcache.vllm without vLLM: importing it imports no vLLM, and vLLM's entry point only warns
when vLLM (or the loader API it knows) is missing, so a process that calls it keeps running. The
load format itself is tested in a real vLLM (python/tests/vllm, tools/check-vllm.sh)."""

from conftest import run_python

WITHOUT_VLLM = """
import logging, sys
sys.modules["vllm"] = None  # as if vLLM were not installed: `import vllm` fails
import snapcache, snapcache.vllm
assert snapcache.vllm is sys.modules["snapcache.vllm"] and snapcache.vllm.LOAD_FORMAT == "snapcache"
warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("vllm.snapcache").addHandler(Keep())
snapcache.vllm.register()  # what vLLM's plugin loader calls
print(warnings)
"""


def test_the_entry_point_warns_instead_of_failing_without_vllm():
    out = run_python(["-c", WITHOUT_VLLM])
    assert "snapcache: load format 'snapcache' not registered" in out, out
    assert "ModuleNotFoundError" in out or "ImportError" in out, out


def test_the_entry_point_is_declared():
    from importlib.metadata import entry_points

    plugins = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert plugins.get("snapcache") == "snapcache.vllm:register", plugins
