"""Write ``numpy.inv``: a small Sphinx inventory of the NumPy names these docs link to.

The other inventories in this folder are the ``objects.inv`` of Debian's documentation
packages (python-sklearn-doc, python-dask-doc, python-distributed-doc, python-xarray-doc,
python-scipy-doc, python3.11-doc), copied so that the docs build without network access.
NumPy's documentation is not packaged there, so its few entries are listed here, with the
addresses of NumPy's documentation. Run ``python docs/_intersphinx/numpy_inv.py`` to rewrite it.
"""

from __future__ import annotations

import zlib
from pathlib import Path

ENTRIES = [
    ("numpy.ndarray", "py:class", "reference/generated/numpy.ndarray.html#$"),
    ("numpy.random.RandomState", "py:class", "reference/random/legacy.html#$"),
    ("numpy.random.Generator", "py:class", "reference/random/generator.html#$"),
    ("numpy.float64", "py:attribute", "reference/arrays.scalars.html#$"),
    ("numpy.dtype", "py:class", "reference/generated/numpy.dtype.html#$"),
    ("numpy.asarray", "py:function", "reference/generated/numpy.asarray.html#$"),
]


def main() -> None:
    body = "".join(f"{name} {role} 1 {uri} -\n" for name, role, uri in ENTRIES)
    header = ("# Sphinx inventory version 2\n# Project: NumPy\n# Version: \n"
              "# The remainder of this file is compressed using zlib.\n")
    path = Path(__file__).with_name("numpy.inv")
    path.write_bytes(header.encode() + zlib.compress(body.encode()))


if __name__ == "__main__":
    main()
