"""The package name inside an APK, so the bridge knows what it installed (and must uninstall).

A real APK's ``AndroidManifest.xml`` is compiled Android binary XML (AOSP
``frameworks/base/libs/androidfw/include/androidfw/ResourceTypes.h``: ``ResChunk_header``,
``ResStringPool_header``, ``ResXMLTree_attrExt``, ``ResXMLTree_attribute``). We read just
enough of it: the string pool, then the first start element (``manifest``) and its
``package`` attribute. A simulated APK (``device_bridge.sim.apk``) names its package in JSON.

Pure functions over bytes; malformed input gives ``None``, never an exception.
"""

from __future__ import annotations

import io
import struct
import zipfile

__all__ = ["apk_package", "manifest_package"]

_RES_XML_TYPE = 0x0003
_RES_STRING_POOL_TYPE = 0x0001
_RES_XML_START_ELEMENT_TYPE = 0x0102
_UTF8_FLAG = 1 << 8
_MAX_MANIFEST = 4 * 1024 * 1024  # a manifest is KBs; refuse to inflate more (zip bombs)


def apk_package(apk: bytes) -> str | None:
    """The package an APK installs, or ``None`` if it cannot be read."""
    try:
        with zipfile.ZipFile(io.BytesIO(apk)) as zf:
            names = set(zf.namelist())
            if "AndroidManifest.xml" in names:
                info = zf.getinfo("AndroidManifest.xml")
                if info.file_size <= _MAX_MANIFEST:
                    found = manifest_package(zf.read(info))
                    if found:
                        return found
    except (zipfile.BadZipFile, OSError, ValueError, RuntimeError, EOFError):
        return None
    return _sim_package(apk)


def _sim_package(apk: bytes) -> str | None:
    from device_bridge.sim.apk import ApkError, read_apk

    try:
        return read_apk(apk).package
    except (ApkError, ValueError, KeyError, OSError, zipfile.BadZipFile):
        return None


def _string_pool(data: bytes, start: int) -> list[str]:
    _, header_size, size, count, _styles, flags, strings_start, _ = struct.unpack_from(
        "<HHIIIIII", data, start
    )
    if count > 100_000 or start + size > len(data):
        raise ValueError("implausible string pool")
    offsets = struct.unpack_from(f"<{count}I", data, start + header_size)
    base = start + strings_start
    utf8 = bool(flags & _UTF8_FLAG)
    out: list[str] = []
    for offset in offsets:
        pos = base + offset
        if utf8:
            # u8/u16 length in characters, then u8/u16 length in bytes, then the bytes.
            pos += 2 if data[pos] & 0x80 else 1
            length = data[pos]
            if length & 0x80:
                length = ((length & 0x7F) << 8) | data[pos + 1]
                pos += 2
            else:
                pos += 1
            out.append(data[pos : pos + length].decode("utf-8", errors="replace"))
        else:
            (length,) = struct.unpack_from("<H", data, pos)
            pos += 2
            if length & 0x8000:
                (low,) = struct.unpack_from("<H", data, pos)
                length = ((length & 0x7FFF) << 16) | low
                pos += 2
            out.append(data[pos : pos + 2 * length].decode("utf-16-le", errors="replace"))
    return out


def manifest_package(data: bytes) -> str | None:
    """The ``package`` attribute of a binary ``AndroidManifest.xml``'s root element."""
    try:
        kind, header_size, _total = struct.unpack_from("<HHI", data, 0)
        if kind != _RES_XML_TYPE:
            return None
        pos = header_size
        strings: list[str] = []
        while pos + 8 <= len(data):
            chunk_type, chunk_header, chunk_size = struct.unpack_from("<HHI", data, pos)
            if chunk_size < 8:
                return None
            if chunk_type == _RES_STRING_POOL_TYPE:
                strings = _string_pool(data, pos)
            elif chunk_type == _RES_XML_START_ELEMENT_TYPE:
                ext = pos + chunk_header  # ResXMLTree_attrExt
                _ns, name, attr_start, attr_size, attr_count = struct.unpack_from(
                    "<IIHHH", data, ext
                )
                if name >= len(strings) or strings[name] != "manifest":
                    return None
                for i in range(attr_count):
                    at = ext + attr_start + i * attr_size
                    _ans, aname, raw, _vsize, _res0, _dtype, _vdata = struct.unpack_from(
                        "<IIIHBBI", data, at
                    )
                    if aname < len(strings) and strings[aname] == "package" and raw < len(strings):
                        return strings[raw] or None
                return None
            pos += chunk_size
    except (struct.error, IndexError, ValueError):
        return None
    return None
