#!/usr/bin/env python3
"""Writes nucleus(1) from the same text as `nucleus --help` and every
command's `--help` (the option tables in cli/), so the manual page cannot
drift from the program.

    python3 scripts/gen_man.py BUILD/nucleus OUT.1
"""
import datetime, os, re, subprocess, sys


def help_text(exe, *args):
    out = subprocess.run([exe, *args, "--help"], capture_output=True, text=True, check=True)
    return out.stdout


def roff(text):
    """Plain text as roff: escape backslashes and lines starting with . or '."""
    lines = []
    for line in text.rstrip("\n").split("\n"):
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def main():
    exe, out = sys.argv[1], sys.argv[2]
    top = help_text(exe)
    commands = re.findall(r"^  ([a-z][a-z-]*)\s{2,}", top.split("commands:", 1)[1], re.M)
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.split()[1]
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    date = datetime.datetime.utcfromtimestamp(int(epoch)) if epoch else datetime.datetime(2026, 1, 1)
    parts = [f'.TH NUCLEUS 1 "{date:%Y-%m-%d}" "nucleus {version}" "User Commands"',
             ".SH NAME", "nucleus \\- text generation for GGUF language models on the CPU",
             ".SH SYNOPSIS", ".B nucleus", "\\fICOMMAND\\fR [\\fIoptions\\fR]",
             ".SH DESCRIPTION", ".nf", roff(top), ".fi"]
    for name in commands:
        text = help_text(exe, name)
        parts += [f".SH COMMAND: {name.upper()}", ".nf", roff(text), ".fi"]
        for sub in re.findall(r"^  (detect|cost|bleu|rouge)\b", text, re.M):
            parts += [f".SS {name} {sub}", ".nf", roff(help_text(exe, name, sub)), ".fi"]
    parts += [".SH FILES", "Models given as hf:ORG/REPO/FILE.gguf are kept in",
              "$NUCLEUS_CACHE (default $XDG_CACHE_HOME/nucleus or ~/.cache/nucleus).",
              "Without -m, commands use the demo model in share/nucleus/models.",
              ".SH SEE ALSO", "The README and docs/ of the nucleus sources."]
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
