"""The tuner config as NVIDIA's example plugin reads it (plugin.c's loadConfig): one
`collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks` line per range, `#` comment lines above.

The plugin reads the file with fgets into a 256-byte buffer: a longer line is cut, and its rest read as a line of its
own, which for a comment would no longer start with `#` and could parse as a config line. Every comment is therefore
kept under 200 bytes, on one line (a newline or other control character inside a path or label is replaced)."""

from pathlib import Path

from commbench.errors import CommbenchError
from commbench.tune.ranges import ConfigLine

FIELDS = "collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks"
COMMENT_MAX_BYTES = 199
"""The longest comment line written, in bytes without its newline (the plugin's line buffer is 256 bytes)."""
_CUT = "..."


def comment(text: str) -> str:
    """text as one `# ` comment line of at most COMMENT_MAX_BYTES bytes, cut with ... where longer."""
    one_line = "".join(character if character.isprintable() else "?" for character in text)
    line = f"# {one_line}"
    encoded = line.encode("utf-8")
    if len(encoded) <= COMMENT_MAX_BYTES:
        return line
    kept = encoded[:COMMENT_MAX_BYTES - len(_CUT)].decode("utf-8", errors="ignore")  # never half a character
    return kept + _CUT


def config_text(header: list[str], lines: list[ConfigLine], footer: list[str]) -> str:
    """The whole file: the header comments, the field names, each line (after a comment naming what it covers),
    then the footer comments."""
    out = [comment(text) for text in header]
    out.append(comment(f"format: {FIELDS} (channels -1: no channel count set)"))
    for line in lines:
        top = line.topology
        sizes = ", ".join(str(size) for size in line.sizes)
        out.append(comment(f"{top.collective} measured at {sizes} B"))
        out += [comment(f"  note: {note}") for note in line.notes]
        out.append(line.text)
    out += [comment(text) for text in footer]
    return "\n".join(out) + "\n"


def write(path: Path, text: str) -> None:
    """Write the config file whole; one line naming the problem where it cannot be written."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except IsADirectoryError:
        raise CommbenchError(f"--out {path} is a folder; give the tuner config's file name, e.g. --out "
                             "nccl_tuner.conf") from None
    except OSError as error:
        raise CommbenchError(f"cannot write --out {path}: {error.strerror}; choose a writable file") from None
