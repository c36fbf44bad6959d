"""pytest set-up of the Python package's tests (ctest's python_api runs them): where the built
package and the CLI are, and one model trained through the API for the whole session."""

import os
import subprocess
import sys

import pytest

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_configure(config):
    # The test program asks for the CLI's kernels (before any tensor operation), as a program
    # that compares its lines with the CLI's would.
    import torchmt

    torchmt.limit_library_isas()


def pytest_addoption(parser):
    parser.addoption("--torchmt-binary", default=os.path.join(SOURCE_DIR, "build", "torchmt"),
                     help="the torchmt command-line tool to agree with")


@pytest.fixture(scope="session")
def binary(request):
    return request.config.getoption("--torchmt-binary")


@pytest.fixture(scope="session")
def sample():
    with open(os.path.join(SOURCE_DIR, "data", "sample.de"), encoding="utf-8") as f:
        de = [line.rstrip("\n") for line in f]
    with open(os.path.join(SOURCE_DIR, "data", "sample.en"), encoding="utf-8") as f:
        en = [line.rstrip("\n") for line in f]
    return de, en


def train_options(out, **extra):
    options = dict(train_src=os.path.join(SOURCE_DIR, "data", "sample.de"),
                   train_tgt=os.path.join(SOURCE_DIR, "data", "sample.en"),
                   valid_src=os.path.join(SOURCE_DIR, "data", "sample.de"),
                   valid_tgt=os.path.join(SOURCE_DIR, "data", "sample.en"),
                   preset="tiny", vocab_size=400, batch_tokens=1000, warmup=100,
                   lr_factor=2.0, dtype="fp32", device="cpu", threads=1, keep_last=0, log_every=10, out=out)
    options.update(extra)
    return {k: v for k, v in options.items() if v is not None}


@pytest.fixture(scope="session")
def trained(tmp_path_factory):
    """A tiny model trained for 1,000 steps on the bundled sample through torchmt.train (enough
    for real, varied sentences): its checkpoint path, the progress lines the callback saw and the
    run's summary."""
    import torchmt

    out = str(tmp_path_factory.mktemp("run") / "run")
    seen = []
    summary = torchmt.train(on_progress=lambda step, line: seen.append((step, line)),
                            **train_options(out, max_steps=1000, validate_every=500))
    return os.path.join(out, "checkpoint_best.pt"), seen, summary


def run_python(code, *args, timeout=300, **popen):
    """Runs `code` in a fresh Python with the package on its path; returns the Popen."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)
