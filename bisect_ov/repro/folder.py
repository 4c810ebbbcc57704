"""The folder a reproducer is written to: checked before any work, filled at the end by one rename.

`check_folder(folder, overwrite)` resolves the destination (a symbolic link is followed to the folder it names)
and refuses, before anything runs: a path that is not a path (None, a number, ``-``, an empty string), a
dangling link, a file, a missing parent, a folder that cannot be written or is a mount point (a folder cannot be
renamed onto one), the current working folder (replacing it would leave the process in a deleted folder), a
non-empty folder without ``overwrite=True``, and with it a non-empty folder that holds no earlier reproducer
(no ``repro.json`` written by bisect_ov) or in which a reproducer's file name is not a plain file (a folder named
``run.py`` is the user's). `overwrite` must be a bool: ``"no"`` is refused, not counted as yes.

`place(where, folder, scratch)` moves the complete, verified folder `where` (built in `scratch`, a temporary
folder beside the destination, so on the same file system) into place: a new or empty destination by one
rename; an earlier reproducer's folder by renaming it aside, carrying the entries that are not a reproducer's
files (the user's notes) into the new folder and renaming that into place. When a rename fails the old folder
is put back as it was, so a failure leaves either the old folder or the new one, never half of each.

Assumes nothing else writes to the destination while it is replaced.
"""

from __future__ import annotations

import json
import os
import pathlib
import stat
import tempfile

from bisect_ov.core.checks import check_flag
from bisect_ov.core.errors import InputError, WriteError

__all__ = ["FILES", "FORMAT", "check_folder", "inside", "place", "scratch_beside"]

FORMAT = "bisect_ov.repro"  # repro.json's "format": what marks a folder as an earlier reproducer
FILES = ("README.md", "run.py", "repro.json", "inputs.npz", "expected.npz", "piece.xml", "piece.bin",
         "target_piece.xml", "target_piece.bin", "target_emulated.xml", "target_emulated.bin",
         "reference_emulated.xml", "reference_emulated.bin")


def check_folder(folder: object, overwrite: object) -> pathlib.Path:
    """The real path of the destination folder, checked; see the module docstring.

    Raises
    ------
    InputError
        `folder` is not a path, or `overwrite` not a bool.
    WriteError
        The destination cannot take a reproducer (the message says why and what to pass instead).
    """
    overwrite = check_flag("overwrite", overwrite)
    path = _path(folder)
    try:
        return _checked(path, overwrite)
    except (OSError, ValueError) as err:
        if isinstance(err, InputError):
            raise
        raise WriteError(f"Cannot write the reproducer to '{path}': {getattr(err, 'strerror', None) or err}. "
                         "Choose another folder.") from err


def inside(path: str | os.PathLike[str], folder: pathlib.Path) -> bool:
    """Whether the file `path` would land in `folder` (or under it), links followed."""
    try:
        real = pathlib.Path(path).expanduser().resolve()
    except (OSError, ValueError, TypeError):
        return False
    return real == folder or folder in real.parents


def _path(folder: object) -> pathlib.Path:
    if not isinstance(folder, (str, os.PathLike)):
        raise InputError(f"The reproducer's folder must be a path (a str or pathlib.Path); got {type(folder).__name__} "
                         f"{folder!r:.60}. Pass the folder to write, such as 'repro_folder'.")
    text = os.fspath(folder)
    if not isinstance(text, str):
        raise InputError(f"The reproducer's folder must be a str or pathlib.Path path, not bytes; got {text!r:.60}.")
    if not text.strip():
        raise InputError("The reproducer's folder is an empty path. Pass the folder to write, such as 'repro_folder'.")
    if text == "-":
        raise InputError("A reproducer is a folder of files and cannot go to stdout ('-'). Pass a folder path, such "
                         "as 'repro_folder' (or './-' for a folder of that name).")
    if "\x00" in text:
        raise InputError(f"The reproducer's folder {text!r:.60} holds a NUL character, which no path can hold.")
    return pathlib.Path(text).expanduser()


def _checked(path: pathlib.Path, overwrite: bool) -> pathlib.Path:
    if path.is_symlink() and not path.exists():
        raise WriteError(f"'{path}' is a symbolic link to '{os.readlink(path)}', which does not exist. Remove the "
                         "link, point it at a folder, or choose another folder.")
    real = path.absolute().resolve()  # links followed: the work is done beside the folder the path names
    shown = f"'{path}'" + (f" (the link to '{real}')" if real != path.absolute() else "")
    if real.exists() and not real.is_dir():
        raise WriteError(f"{shown} is a file; a reproducer is a folder. Pass a folder path.")
    parent = real.parent
    if not parent.is_dir():
        what = "is a file, not a folder" if parent.exists() else "does not exist"
        raise WriteError(f"Cannot write the reproducer to {shown}: '{parent}' {what}. Create the folder, or choose "
                         "another one.")
    if not os.access(parent, os.W_OK | os.X_OK) or (real.is_dir() and not os.access(real, os.W_OK | os.X_OK)):
        raise WriteError(f"Cannot write the reproducer to {shown}: no write permission in '{parent}' (the reproducer "
                         "is built beside the folder, then renamed into place). Choose another folder.")
    if real.is_dir():
        if real == parent or os.stat(real).st_dev != os.stat(parent).st_dev:
            raise WriteError(f"{shown} is a mount point: a folder cannot be renamed onto it. Write the reproducer "
                             f"into a folder inside it, such as '{path / 'repro'}'.")
        cwd = pathlib.Path.cwd().resolve()
        if cwd == real or real in cwd.parents:
            raise WriteError(f"{shown} is the current working folder (or holds it): it is replaced as a whole, which "
                             "would leave this process in a deleted folder. Pass it from the folder above.")
        entries = sorted(p.name for p in real.iterdir())
        if entries and not overwrite:
            raise WriteError(f"The folder {shown} is not empty; pass overwrite=True (--overwrite) to replace an earlier "
                             "reproducer in it, or choose an empty or new folder.")
        if entries:
            _check_reproducer(real, shown, entries)
    return real


def _check_reproducer(real: pathlib.Path, shown: str, entries: list[str]) -> None:
    """An earlier reproducer's folder: its repro.json written by bisect_ov, each reproducer file a plain file."""
    mark = real / "repro.json"
    try:
        written = json.loads(mark.read_text(encoding="utf-8")) if mark.is_file() and not mark.is_symlink() else None
    except (OSError, ValueError):
        written = None
    if not (isinstance(written, dict) and written.get("format") == FORMAT):
        listed = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        raise WriteError(f"The folder {shown} holds files ({listed}) but no earlier reproducer (no repro.json written "
                         "by bisect_ov): overwrite replaces only a reproducer, never your own files. Choose an empty or "
                         "new folder.")
    odd = [n for n in FILES if n in entries and not stat.S_ISREG(os.lstat(real / n).st_mode)]
    if odd:
        raise WriteError(f"The folder {shown} holds '{odd[0]}', which is not a file an earlier reproducer wrote (a "
                         "folder or a link): it is left alone, so the reproducer cannot replace it. Move it, or choose "
                         "an empty or new folder.")


def scratch_beside(folder: pathlib.Path) -> tempfile.TemporaryDirectory:
    """The temporary folder the reproducer is built in, beside `folder` (so on its file system).

    Raises
    ------
    WriteError
        It cannot be made there (a read-only or virtual file system).
    """
    try:
        return tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}.")
    except OSError as err:
        raise WriteError(f"Cannot write the reproducer to '{folder}': making a folder in '{folder.parent}' failed "
                         f"({err.strerror or err}). Choose a folder on a disk you can write to.") from err


def place(where: pathlib.Path, folder: pathlib.Path, scratch: pathlib.Path) -> None:
    """Move the complete folder `where` into `folder`; see the module docstring.

    Raises
    ------
    WriteError
        A rename failed (the destination as it was before), or the destination changed since it was checked.
    """
    try:
        if not folder.exists():
            os.rename(where, folder)
            return
        if not any(folder.iterdir()):
            folder.rmdir()
            os.rename(where, folder)
            return
        _check_reproducer(folder, f"'{folder}'", sorted(p.name for p in folder.iterdir()))
        _swap(where, folder, scratch / "previous")
    except OSError as err:
        if isinstance(err, WriteError):
            raise
        raise WriteError(f"Moving the reproducer into '{folder}' failed: {err.strerror or err}. The folder is as it "
                         "was; nothing was written.") from err


def _swap(where: pathlib.Path, folder: pathlib.Path, previous: pathlib.Path) -> None:
    """Replace the earlier reproducer `folder` by `where`, carrying the user's own entries across."""
    mode = stat.S_IMODE(folder.stat().st_mode)
    os.rename(folder, previous)
    carried: list[str] = []
    try:
        for entry in sorted(previous.iterdir()):
            if entry.name not in FILES:
                os.rename(entry, where / entry.name)
                carried.append(entry.name)
        os.chmod(where, mode)
        os.rename(where, folder)
    except OSError:
        for name in carried:  # put the folder back as it was
            os.rename(where / name, previous / name)
        os.rename(previous, folder)
        raise
