"""Reading the package name out of an APK (binary AndroidManifest.xml, or a simulated APK)."""

from __future__ import annotations

import io
import struct
import zipfile

import pytest

from device_bridge.adb.apkinfo import apk_package, manifest_package
from device_bridge.sim.apk import SimPackage, build_apk


def string_pool(strings: list[str], *, utf8: bool) -> bytes:
    blobs = []
    for s in strings:
        if utf8:
            raw = s.encode()
            blobs.append(bytes([len(s), len(raw)]) + raw + b"\x00")
        else:
            blobs.append(struct.pack("<H", len(s)) + s.encode("utf-16-le") + b"\x00\x00")
    offsets, pos = [], 0
    for b in blobs:
        offsets.append(pos)
        pos += len(b)
    body = b"".join(blobs)
    body += b"\x00" * (-len(body) % 4)
    header_size = 28
    strings_start = header_size + 4 * len(strings)
    size = strings_start + len(body)
    flags = 1 << 8 if utf8 else 0
    header = struct.pack(
        "<HHIIIIII", 0x0001, header_size, size, len(strings), 0, flags, strings_start, 0
    )
    return header + struct.pack(f"<{len(strings)}I", *offsets) + body


def start_element(name: int, attrs: list[tuple[int, int]]) -> bytes:
    ext = struct.pack("<IIHHHHHH", 0xFFFFFFFF, name, 20, 20, len(attrs), 0, 0, 0)
    body = b"".join(struct.pack("<IIIHBBI", 0xFFFFFFFF, n, v, 8, 0, 3, v) for n, v in attrs)
    node = struct.pack("<II", 1, 0xFFFFFFFF)  # line number, comment
    size = 16 + len(ext) + len(body)
    return struct.pack("<HHI", 0x0102, 16, size) + node + ext + body


def axml(package: str, *, utf8: bool, root: str = "manifest") -> bytes:
    strings = ["versionCode", "package", root, package]
    chunks = string_pool(strings, utf8=utf8)
    chunks += struct.pack("<HHI", 0x0180, 8, 8)  # an empty resource map, to be skipped
    chunks += start_element(2, [(0, 0), (1, 3)])
    return struct.pack("<HHI", 0x0003, 8, 8 + len(chunks)) + chunks


def apk_with(manifest: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("AndroidManifest.xml", manifest)
        zf.writestr("classes.dex", b"dex\n035\x00")
    return out.getvalue()


@pytest.mark.parametrize("utf8", [True, False])
def test_binary_manifest(utf8: bool) -> None:
    manifest = axml("com.example.app", utf8=utf8)
    assert manifest_package(manifest) == "com.example.app"
    assert apk_package(apk_with(manifest)) == "com.example.app"


def test_simulated_apk() -> None:
    assert (
        apk_package(build_apk(SimPackage(package="com.example.sim", kind="app")))
        == "com.example.sim"
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a zip",
        apk_with(b""),
        apk_with(b"\x03\x00\x08\x00"),
        apk_with(axml("com.x", utf8=True)[:40]),
        apk_with(axml("com.x", utf8=True, root="application")),
        apk_with(b"<manifest package='com.text.xml'/>"),
    ],
)
def test_unreadable_gives_none(data: bytes) -> None:
    assert apk_package(data) is None
