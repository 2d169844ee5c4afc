"""scripts/pip_to_uv.py: uv gets the indexes, local wheels and constraints pip would use."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pip_to_uv.py"
spec = importlib.util.spec_from_file_location("pip_to_uv", SCRIPT)
pip_to_uv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pip_to_uv)


def test_every_value_of_a_multi_valued_option_becomes_its_own_flag():
    lines = ["global.extra-index-url='file:///a/simple file:///b/simple'",
             "global.find-links='/opt/wheels'", "global.constraint='/etc/c.txt'",
             "global.cert='/etc/ssl/certs/ca.crt'", "global.timeout='60'"]
    assert pip_to_uv.uv_options(lines) == [
        "--extra-index-url", "file:///a/simple", "--extra-index-url", "file:///b/simple",
        "--find-links", "/opt/wheels", "--constraint", "/etc/c.txt"]


def test_an_environment_variable_overrides_the_files_whatever_the_order_of_the_lines():
    lines = [":env:.index-url='https://mirror/simple'", "global.index-url='https://other/simple'",
             "user.find-links='/a'", "site.find-links='/b'"]
    assert pip_to_uv.uv_options(lines) == ["--index-url", "https://mirror/simple",
                                           "--find-links", "/b"]


def test_no_index_and_no_configuration():
    assert pip_to_uv.uv_options([":env:.no-index='true'"]) == ["--no-index"]
    assert pip_to_uv.uv_options([":env:.no-index='0'"]) == []
    assert pip_to_uv.uv_options(["", "not a setting"]) == []


def test_the_script_reads_pip_config_list_from_stdin_one_option_per_line():
    out = subprocess.run([sys.executable, str(SCRIPT)], input="global.find-links='/w /x'\n",
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["--find-links", "/w", "--find-links", "/x"]
