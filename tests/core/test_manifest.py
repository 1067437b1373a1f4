"""``kernelbay.toml``: options split as a shell would, unknown tables and keys refused by name."""

from __future__ import annotations

import pytest
from kernelbay.errors import InvalidArgumentError, SettingError
from kernelbay.settings import read_manifest


def write(tmp_path, text: str) -> str:
    p = tmp_path / "kernelbay.toml"
    p.write_text(text)
    return str(p)


def test_options_string_is_split_like_a_shell(tmp_path) -> None:
    m = read_manifest(
        write(
            tmp_path,
            '[defaults]\noptions = "-O3"\n[sources."a.cu"]\noptions = "-DN=4  -DMSG=\'a b\'"\nheaders = "x.cuh"\n',
        )
    )
    assert m["defaults"]["options"] == ["-O3"]  # once compiled as "- O 3": a string iterated by character
    assert m["sources"]["a.cu"]["options"] == ["-DN=4", "-DMSG=a b"]
    assert m["sources"]["a.cu"]["headers"] == ["x.cuh"]


def test_option_lists_are_kept(tmp_path) -> None:
    m = read_manifest(write(tmp_path, '[sources."a.cu"]\nname = "k"\noptions = ["-DA=1 2"]\nskip = false\n'))
    assert m["sources"]["a.cu"] == {"name": "k", "options": ["-DA=1 2"], "skip": False}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[defaults]\noption = ["-O3"]\n', "unknown key 'option' in [defaults]"),
        ('[sources."a.cu"]\nheader = ["x.cuh"]\n', "unknown key 'header' in [sources.\"a.cu\"]"),
        ('[default]\noptions = ["-O3"]\n', "unknown table [default]"),
        ('[sources."a.cu"]\nskip = "yes"\n', 'skip in [sources."a.cu"] must be true or false'),
        ('[sources."a.cu"]\noptions = [1]\n', "must be a string or a list of strings"),
        ('[sources."a.cu"]\noptions = "-DMSG=\'open"\n', "closing quotation"),
        ("[defaults\n", "is not valid TOML"),
    ],
)
def test_mistakes_are_errors_naming_them(tmp_path, text: str, named: str) -> None:
    with pytest.raises(SettingError) as info:
        read_manifest(write(tmp_path, text))
    assert named in str(info.value)
    assert isinstance(info.value, InvalidArgumentError)


def test_missing_manifest(tmp_path) -> None:
    with pytest.raises(SettingError, match="cannot read the manifest"):
        read_manifest(str(tmp_path / "nope.toml"))
