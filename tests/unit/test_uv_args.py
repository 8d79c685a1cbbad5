"""scripts/uv_args.py: pip's configuration as uv's arguments (the setup's fast installer)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("uv_args", REPO / "scripts" / "uv_args.py")
assert _spec is not None and _spec.loader is not None
uv_args_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_args_mod)


def test_indexes_links_and_constraints_translate_and_a_missing_local_index_is_left_out(
    tmp_path,
) -> None:
    here = tmp_path / "simple"
    here.mkdir()
    config = (
        f":env:.find-links='/opt/wheels'\n"
        f"global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
        f"global.constraint='/etc/xdg/pip/constraints.txt'\n"
        f"global.extra-index-url='file://{here} file://{tmp_path}/gone'\n"
        f"global.index-url='https://example.org/simple'\n"
        f"install.trusted-host='example.org'\n"
    )
    got = uv_args_mod.uv_args(config)
    assert got == [
        "--index-strategy", "unsafe-best-match",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--extra-index-url", f"file://{here}",
        "--index-url", "https://example.org/simple",
        "--allow-insecure-host", "example.org",
    ]  # fmt: skip


def test_a_setting_without_a_translation_leaves_the_install_to_pip() -> None:
    assert uv_args_mod.uv_args("global.only-binary=':all:'\n") is None
    assert uv_args_mod.uv_args("global.no-index='true'\n") is None
    # nothing configured: uv's defaults, with pip's search of every index
    assert uv_args_mod.uv_args("") == ["--index-strategy", "unsafe-best-match"]
