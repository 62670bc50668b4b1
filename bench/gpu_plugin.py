"""What the GPU benches share: the CUDA plugin's bench entry points through
ctypes. Each entry takes its own arguments, then (double *ms, char *err,
size_t cap) and returns 0, 1 without a device, 2 on an error."""
import ctypes
import os
import sys


def default_path():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("DSTRAIN_CUDA_PLUGIN",
                          os.path.join(here, "..", "build", "libdstrain_cuda.so"))


def entry(path, name, argtypes):
    """The plugin's bench entry `name` taking `argtypes` before (ms, err, cap)."""
    fn = getattr(ctypes.CDLL(path), name)
    fn.argtypes = list(argtypes) + [ctypes.POINTER(ctypes.c_double), ctypes.c_char_p,
                                    ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def time_ms(fn, what, *args):
    """Milliseconds per call as the entry measured them; exits with the plugin's reason."""
    ms = ctypes.c_double(0.0)
    err = ctypes.create_string_buffer(512)
    rc = fn(*args, ctypes.byref(ms), err, len(err))
    if rc == 1:
        sys.exit("%s: no CUDA device visible to the plugin" % os.path.basename(sys.argv[0]))
    if rc != 0:
        sys.exit("%s: %s: %s" % (os.path.basename(sys.argv[0]), what, err.value.decode()))
    return ms.value
