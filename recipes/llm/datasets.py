"""Text the language-model recipes are measured on."""
from __future__ import annotations

from recipe_zoo.core.datasets import DatasetInfo, Download, dataset
from recipe_zoo.recipes.llm import debian_docs

dataset(DatasetInfo(
    name="tinyshakespeare", domain="text", source="cache", path="text/tinyshakespeare",
    description="Tiny Shakespeare (char-rnn): 1,115,394 ASCII characters of the plays, one file",
    split="in reading order: first 85% of the characters train, next 5% validation, last 10% test",
    metric="test bits per byte (the first 100,000 bytes of test)",
    downloads=(Download("https://raw.githubusercontent.com/karpathy/char-rnn/6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/"
                        "data/tinyshakespeare/input.txt",
                        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),)))
dataset(DatasetInfo(
    name="linux-python-docs", domain="text", source="cache", path="text/linux_python_docs",
    description="the reStructuredText and plain-text sources of the Linux 6.1 and Python 3.11 documentation, as "
                "Debian 12 ships them (linux-doc-6.1 6.1.176-1, python3.11-doc 3.11.2-6+deb12u8): 5,625 documents, "
                "39.6 MB in one file, for GPU budgets (GPL-2.0 kernel docs, PSF-2.0 Python docs)",
    split="the documents in the order of a hash of their names; first 85% of the characters train, next 5% "
          "validation, last 10% test",
    metric="test bits per byte (the first 100,000 bytes of test)",
    downloads=(Download("https://snapshot.debian.org/file/97a5e89b363de0a3439a2b0953a366683e859d77",
                        "0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f", unpack=False),
               Download("https://snapshot.debian.org/file/d4a9ab01ca393dc30872e1ea65f14be24cfcfe73",
                        "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b", unpack=False)),
    tree_sha256="06f47134c55222bb10453ef4de6dce21304b3f1e0dd0a808b87896844ce526d2",
    build=debian_docs.linux_python_docs))
