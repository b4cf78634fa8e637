"""The pytest plugin, run as users run it: pytest in a subprocess with `-p ptxforge.pytest_plugin`."""

import os
import subprocess
import sys
import textwrap

USER_TESTS = textwrap.dedent('''
    import numpy as np
    import pytest

    import ptxforge as pf

    RACY = """.version 8.0
    .target sm_80
    .address_size 64
    .visible .entry rotate(.param .u64 out)
    {
        .reg .b32 %r<6>;
        .reg .b64 %rd<3>;
        .shared .align 4 .b32 buf[32];
        mov.u32 %r1, %tid.x;
        shl.b32 %r2, %r1, 2;
        mov.u32 %r5, buf;
        add.u32 %r2, %r2, %r5;
        st.shared.u32 [%r2], %r1;
        // SYNC
        add.u32 %r3, %r1, 1;
        and.b32 %r3, %r3, 31;
        shl.b32 %r3, %r3, 2;
        add.u32 %r3, %r3, %r5;
        ld.shared.u32 %r4, [%r3];
        ld.param.u64 %rd1, [out];
        mul.wide.u32 %rd2, %r1, 4;
        add.u64 %rd1, %rd1, %rd2;
        st.global.u32 [%rd1], %r4;
        ret;
    }
    """
    FIXED = RACY.replace("// SYNC", "bar.sync 0;")


    def run(text, **kw):
        out = np.zeros(32, np.uint32)
        pf.parse(text).kernel("rotate").launch((1,), (32,), [out], **kw)
        return out


    @pytest.mark.sanitize
    def test_racy_marked():
        run(RACY)


    @pytest.mark.sanitize
    def test_fixed_marked():
        assert (run(FIXED) == (np.arange(32) + 1) % 32).all()


    def test_racy_fixture(ptxforge_sanitize):
        run(RACY)


    def test_racy_caught_still_fails(ptxforge_sanitize):
        with pytest.raises(pf.SanitizerError):
            run(RACY)


    def test_racy_without_the_plugin_asking():
        run(RACY, device="emu")


    def test_on_each_device(device):
        assert (run(FIXED, device=device) == (np.arange(32) + 1) % 32).all()
''')


def test_plugin_fails_the_racy_test_with_the_report_and_passes_the_fixed_one(tmp_path):
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PTXFORGE_DEVICE": "emu"}
    env.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "ptxforge.pytest_plugin", "-p", "no:cacheprovider",
                          "-rA", "-q", "-n", "0", str(tmp_path / "test_user.py")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    out = run.stdout
    outcome = {line.split(" ")[1].split("::")[-1]: line.split(" ")[0] for line in out.splitlines()
               if line.startswith(("PASSED ", "FAILED ", "SKIPPED "))}
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert outcome.get("test_racy_marked") == "FAILED", out
    assert outcome["test_fixed_marked"] == "PASSED"
    assert outcome["test_racy_fixture"] == "FAILED"
    assert outcome["test_racy_caught_still_fails"] == "FAILED"
    assert outcome["test_racy_without_the_plugin_asking"] == "PASSED"
    assert outcome["test_on_each_device[emu]"] == "PASSED"
    cuda = outcome.get("test_on_each_device[cuda]")
    assert cuda == "PASSED" or (skipped and "no CUDA GPU" in "".join(skipped)), out
    assert "ptxforge sanitizer: 1 report in 1 launch" in out
    assert "========= Race (write-read) on __shared__ memory, 4 bytes" in out
    assert "in kernel rotate" in out and "Traceback" not in out
    assert run.returncode == 1
