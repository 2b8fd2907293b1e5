#!/usr/bin/env python3
"""ulnic(1) is the command's own help: every command `ulnic --help` lists has
a section in the page and the page has no other; each section is, word for
word, what `ulnic help CMD` (and `ulnic CMD --help`) prints; the page renders
without warnings.

Needs ULNIC_BIN (the ulnic executable) and ULNIC_MAN (the generated page).
"""
import os
import re
import shutil
import subprocess
import unittest

ULNIC = os.environ.get("ULNIC_BIN", "build/bin/ulnic")
MAN = os.environ.get("ULNIC_MAN", "build/man/ulnic.1")


def ulnic(*args, code=0):
    p = subprocess.run([ULNIC, *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == code, f"ulnic {' '.join(args)}: exit {p.returncode}\n{p.stderr}"
    return p.stdout


def unroff(text):
    return text.replace("\\&", "").replace("\\-", "-").replace("\\e", "\\")


def page_sections(page):
    """{".SS name" or ".SH name": the text of its .nf/.fi block}, in order."""
    out, name, block = {}, None, None
    for line in page.splitlines():
        if line.startswith((".SS ", ".SH ")):
            name = unroff(line[4:].strip('"'))
        elif line == ".nf":
            block = []
        elif line == ".fi":
            out[name] = "".join(unroff(b) + "\n" for b in block)
            block = None
        elif block is not None:
            block.append(line)
    return out


def help_commands(text):
    """The commands `ulnic --help` lists: an entry starts two spaces in, and
    its name is the lowercase words before the first argument or column 34."""
    names = []
    for line in text.splitlines():
        if re.match(r"  [a-z]", line):
            words = []
            for w in line[:34].split():
                if not re.fullmatch(r"[a-z][a-z-]*", w):
                    break
                words.append(w)
            names.append(" ".join(words))
    return names


class ManPage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(MAN) as f:
            cls.page = f.read()
        cls.sections = page_sections(cls.page)
        cls.usage = ulnic("--help")

    def test_the_page_is_what_the_command_generates(self):
        self.assertEqual(ulnic("help", "--roff"), self.page)

    def test_every_command_has_a_section_and_no_section_is_stale(self):
        listed = help_commands(self.usage)
        self.assertIn("node start", listed)
        self.assertIn("run", listed)
        documented = [n for n in self.sections if n not in ("ENVIRONMENT",)]
        self.assertEqual(documented, listed)

    def test_each_section_is_what_ulnic_help_prints(self):
        for name in help_commands(self.usage):
            with self.subTest(command=name):
                self.assertEqual(ulnic("help", *name.split()), self.sections[name])
                if name != "help":
                    self.assertEqual(ulnic(*name.split(), "--help"), self.sections[name])

    def test_the_help_is_the_sections_and_the_environment(self):
        self.assertEqual(ulnic("help"), self.usage)
        body = "".join(self.sections[n] for n in help_commands(self.usage))
        self.assertEqual(self.usage, "usage: ulnic <command> ...\n\n" + body + "\n" + self.sections["ENVIRONMENT"])

    def test_a_group_prints_its_commands_and_an_unknown_one_is_a_usage_error(self):
        node = [n for n in help_commands(self.usage) if n.startswith("node ")]
        self.assertEqual(ulnic("help", "node"), "".join(self.sections[n] for n in node))
        ulnic("help", "frobnicate", code=2)
        ulnic("frobnicate", code=2)
        ulnic("node", code=2)

    @unittest.skipUnless(shutil.which("groff"), "groff is not installed")
    def test_the_page_renders_without_warnings(self):
        p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", MAN], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual((p.returncode, p.stderr), (0, ""))


if __name__ == "__main__":
    unittest.main(verbosity=2)
