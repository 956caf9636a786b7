"""What a model name or a model file's path may be, checked before either touches the disk.

A model name is one folder of the repository: not empty, not "." or "..", no path separator,
no NUL or other control character, not hidden (the repository skips hidden folders). A file
sent with a load request ("file:<version>/<name>") is a relative path inside the model's
folder: no absolute path, no "." or ".." part, no empty part.
"""

from __future__ import annotations

from serve.errors import ServeError

# A folder name longer than this is refused by common file systems anyway (ext4, xfs: 255).
MAX_NAME_BYTES = 255


def _bad_character(text: str) -> str:
    """The first character a name may not hold, described, or ""."""
    for character in text:
        if character == "\0":
            return "a NUL character"
        if ord(character) < 0x20 or ord(character) == 0x7F:
            return f"a control character (0x{ord(character):02x})"
        if character == "\\":
            return "a backslash"
    return ""


def check_model_name(name: str) -> None:
    """Raise INVALID_ARG naming the problem when `name` could leave the repository's folder."""
    if not name:
        raise ServeError.invalid("model name is empty")
    if name in (".", ".."):
        raise ServeError.invalid(f"model name '{name}' is not a model folder")
    if "/" in name:
        raise ServeError.invalid(
            f"model name '{printable(name)}' holds a '/': a name is one folder"
        )
    bad = _bad_character(name)
    if bad:
        raise ServeError.invalid(f"model name '{printable(name)}' holds {bad}")
    if name.startswith("."):
        raise ServeError.invalid(
            f"model name '{printable(name)}' starts with '.': hidden folders are not models"
        )
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise ServeError.invalid(f"model name is longer than {MAX_NAME_BYTES} bytes")


def check_model_file(name: str, relative: str) -> None:
    """Raise INVALID_ARG when a file sent with a load of `name` is no path inside its folder."""
    where = f"load of '{name}': file path '{printable(relative)}'"
    if not relative:
        raise ServeError.invalid(f"{where} is empty")
    if relative.startswith("/"):
        raise ServeError.invalid(f"{where} is absolute: give it relative to the model's folder")
    bad = _bad_character(relative)
    if bad:
        raise ServeError.invalid(f"{where} holds {bad}")
    for part in relative.split("/"):
        if part in ("", ".", ".."):
            shown = "an empty part" if not part else f"a '{part}' part"
            raise ServeError.invalid(f"{where} has {shown}: name the file inside the model")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise ServeError.invalid(f"{where} has a part longer than {MAX_NAME_BYTES} bytes")


def check_version(version: str) -> int:
    """A requested model version ("" is none) as a number; INVALID_ARG unless ASCII digits."""
    if not (version.isascii() and version.isdigit()) or len(version) > 19:
        raise ServeError.invalid(f"model version '{printable(version)}' is not a version number")
    return int(version)


def printable(text: str, limit: int = 80) -> str:
    """`text` safe to print in an error: control characters escaped, long text cut."""
    shown = text.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= limit else shown[:limit] + "..."
