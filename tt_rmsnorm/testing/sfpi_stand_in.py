"""A stand-in for the SFPI RISC-V compiler, so that ttnn opens mock devices where the real toolchain cannot be had.

Opening a device builds firmware and kernels with `riscv-tt-elf-g++`. `install_compiler_stand_in` writes a shell
script in its place (only where no real compiler exists, only inside this project's virtual environment) that compiles
nothing:

- `--version` prints the sfpi version of the installed ttnn, so the firmware build key matches a pre-compiled firmware
  directory shipped in the wheel and no firmware is compiled;
- `-x c++-header` fails (tt-metal then skips its precompiled header);
- `-c ... -o X.o` writes an empty object (and the `-MF` depfile);
- a link `-o X.elf` copies a stub kernel ELF (`stub_kernel_elf`: two RISC-V instructions with one R_RISCV_JAL
  relocation, which tt-metal's XIP relocation accepts), or, outside `kernels/`, the pre-compiled firmware ELF of that
  target.

`tt_rmsnorm.testing.mock_cluster.configure` installs it before ttnn opens anything.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import sys
from pathlib import Path

from tt_rmsnorm.hardware import MockClusterError

COMPILER = "riscv-tt-elf-g++"
STAND_IN_MARK = "tt_rmsnorm mock-cluster stand-in for the SFPI compiler"
GCC_VERSION = "15.1.0"  # the gcc inside sfpi 7.89.0; part of the --version line hashed into the firmware key


def stub_kernel_elf() -> bytes:
    """A relocatable 32-bit RISC-V ELF that tt-metal's kernel loader accepts: one R+X PT_LOAD segment at address 0
    holding `jal x0,+4; ret`, and a .rela.text with one R_RISCV_JAL at offset 0 against the .text section symbol."""
    text = struct.pack("<II", 0x0040006F, 0x00008067)
    symtab = bytes(16) + struct.pack("<IIIBBH", 0, 0, 0, 3, 0, 1)  # null symbol; STT_SECTION, STB_LOCAL, shndx 1
    strtab = b"\0"
    rela = struct.pack("<IIi", 0, (1 << 8) | 17, 4)  # r_offset 0, sym 1, R_RISCV_JAL, addend 4
    names = [b".text", b".symtab", b".strtab", b".rela.text", b".shstrtab"]
    shstrtab, name_at = b"\0", {}
    for n in names:
        name_at[n] = len(shstrtab)
        shstrtab += n + b"\0"
    header_bytes = 52 + 32  # ELF header + one program header
    body, at = b"", {}
    for n, blob in zip(names, (text, symtab, strtab, rela, shstrtab), strict=True):
        body += bytes(-(header_bytes + len(body)) % 4)
        at[n] = header_bytes + len(body)
        body += blob
    body += bytes(-(header_bytes + len(body)) % 4)
    shoff = header_bytes + len(body)
    ident = b"\x7fELF" + bytes([1, 1, 1, 0]) + bytes(8)  # 32-bit, little endian, version 1
    ehdr = ident + struct.pack("<HHIIIIIHHHHHH", 2, 243, 1, 0, 52, shoff, 0, 52, 32, 1, 40, len(names) + 1, len(names))
    phdr = struct.pack("<IIIIIIII", 1, at[b".text"], 0, 0, len(text), len(text), 5, 4)  # PT_LOAD, R+X

    def sh(name, typ, flags, size, link=0, info=0, align=1, entsize=0):
        return struct.pack("<IIIIIIIIII", name_at[name], typ, flags, 0, at[name], size, link, info, align, entsize)

    shdrs = bytes(40) + b"".join(
        [
            sh(b".text", 1, 0x6, len(text), align=4),  # PROGBITS, ALLOC|EXECINSTR
            sh(b".symtab", 2, 0, len(symtab), link=3, info=2, align=4, entsize=16),
            sh(b".strtab", 3, 0, len(strtab)),
            sh(b".rela.text", 4, 0x40, len(rela), link=2, info=1, align=4, entsize=12),  # INFO_LINK to .text
            sh(b".shstrtab", 3, 0, len(shstrtab)),
        ]
    )
    return ehdr + phdr + body + shdrs


def _stand_in_script(version_line: str) -> str:
    return f"""#!/bin/sh
# {STAND_IN_MARK}. Written by tt_rmsnorm/sfpi_stand_in.py; safe to delete.
# No code is compiled: objects are empty, kernels link to a stub ELF, firmware to the wheel's pre-compiled ELFs.
here=$(cd "$(dirname "$0")" && pwd)
ttnn_dir=$(cd "$here/../../../.." && pwd)
out=""; mf=""; prev=""
for a in "$@"; do
  case "$prev" in
    -o) out=$a ;;
    -MF) mf=$a ;;
    -x) [ "$a" = c++-header ] && {{ echo "stand-in: no precompiled headers" >&2; exit 1; }} ;;
  esac
  [ "$a" = --version ] && {{ echo "{version_line}"; exit 0; }}
  prev=$a
done
[ -n "$mf" ] && printf '%s:\\n' "$out" > "$mf"
case "$out" in
  "") exit 0 ;;
  *.elf)
    case "$out" in
      */kernels/*|kernels/*) exec cp "$here/stub_kernel.elf" "$out" ;;
    esac
    target=$(basename "$out"); target=${{target%%.*}}
    for fw in "$ttnn_dir"/tt_metal/pre-compiled/*/"$target"/"$target".elf; do
      key=$(basename "$(dirname "$(dirname "$fw")")")
      case "$out" in *"$key"*) exec cp "$fw" "$out" ;; esac
    done
    echo "stand-in: no pre-compiled firmware for $out" >&2; exit 1 ;;
  *) : > "$out" ;;
esac
exit 0
"""


def _ttnn_dir() -> Path:
    spec = importlib.util.find_spec("ttnn")
    if spec is None or spec.origin is None:
        raise MockClusterError("ttnn is not installed in this Python environment")
    return Path(spec.origin).resolve().parent


def _sfpi_version_line(ttnn_dir: Path) -> str:
    fields = {}
    for line in (ttnn_dir / "tt_metal" / "sfpi-version").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            fields[key.strip()] = value.strip().strip("'\"")
    return f"{COMPILER} (tenstorrent/sfpi:{fields['sfpi_version']}[{fields['sfpi_build']}]) {GCC_VERSION}"


def real_compiler() -> Path | None:
    """A real SFPI compiler where tt-metal looks for one (<ttnn>/runtime/sfpi, /opt/tenstorrent/sfpi), else None."""
    for root in (_ttnn_dir() / "runtime" / "sfpi", Path("/opt/tenstorrent/sfpi")):
        exe = root / "compiler" / "bin" / COMPILER
        if exe.exists() and STAND_IN_MARK not in exe.read_bytes()[:400].decode("latin-1"):
            return exe
    return None


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


def install_compiler_stand_in() -> Path | None:
    """Install the stand-in at <ttnn>/runtime/sfpi/compiler/bin/ unless a real compiler exists. Idempotent and safe
    against concurrent callers. Returns the stand-in's path, or None when a real compiler is used."""
    if real_compiler() is not None:
        return None
    ttnn_dir = _ttnn_dir()
    if sys.prefix == sys.base_prefix or not ttnn_dir.is_relative_to(Path(sys.prefix).resolve()):
        raise MockClusterError(
            f"refusing to install the SFPI stand-in: ttnn ({ttnn_dir}) is not inside this project's virtual "
            f"environment ({sys.prefix}); run through `make test`, which creates .venv"
        )
    bin_dir = ttnn_dir / "runtime" / "sfpi" / "compiler" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe, stub = bin_dir / COMPILER, bin_dir / "stub_kernel.elf"
    script = _stand_in_script(_sfpi_version_line(ttnn_dir)).encode()
    if not stub.exists() or stub.read_bytes() != stub_kernel_elf():
        _write_atomically(stub, stub_kernel_elf(), 0o644)
    if not exe.exists() or exe.read_bytes() != script:
        _write_atomically(exe, script, 0o755)
    return exe
