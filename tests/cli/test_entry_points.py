"""The ways the `datapipe` command is started, and what it imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.imagegen import make_image_folder

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    """This checkout's package first, however the interpreter was installed."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_python_m_datapipe_cli_is_the_command() -> None:
    result = subprocess.run([sys.executable, "-m", "datapipe.cli", "--help"],
                            capture_output=True, text=True, timeout=60, env=_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: datapipe [OPTIONS] COMMAND")
    for command in ("bench", "convert", "doctor", "inspect", "profile", "verify"):
        assert f"\n  {command} " in result.stdout


def test_the_console_script_runs_main() -> None:
    # What pip writes for pyproject's [project.scripts] entry: datapipe = "datapipe.cli:main".
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "datapipe"]
    assert script.value == "datapipe.cli:main"
    launcher = Path(sys.executable).with_name("datapipe")
    command = [str(launcher)] if launcher.is_file() else \
        [sys.executable, "-c", "import sys; from datapipe.cli import main; sys.exit(main())"]
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60,
                            env=_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: datapipe [OPTIONS] COMMAND")
    wrong = subprocess.run([*command, "bench"], capture_output=True, text=True, timeout=60,
                           env=_env())
    assert wrong.returncode == 2
    assert wrong.stderr == "datapipe: error: bench: give a DATASET to measure, or --suite\n"


def test_convert_inspect_verify_and_help_never_import_torch(tmp_path: Path) -> None:
    """torch costs more than a second to import, and converting data has no use for it."""
    src = make_image_folder(tmp_path / "src", classes=2, per_class=2)
    out = tmp_path / "out"
    code = f"""
import sys
from datapipe.cli import main
for args in (["--help"], ["bench", "--help"], ["profile", "--help"],
             ["convert", "images", {str(src)!r}, {str(out)!r}, "--workers", "1"],
             ["inspect", {str(out)!r}], ["verify", {str(out)!r}]):
    try:
        main(args)
    except SystemExit as exc:
        assert not exc.code, (args, exc.code)
print("torch imported:", "torch" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("torch imported: False\n")
