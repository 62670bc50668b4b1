"""The libdstrain.so a built wheel belongs with (see _lib's lookup order).

In the source tree, and in an editable install, there is none; the build
backend (build_backend/dstrain_build.py) writes this module into each wheel
with the library it found when building it.
"""

from typing import Optional

#: The libdstrain.so this package was installed against, or None.
LIBRARY: Optional[str] = None
