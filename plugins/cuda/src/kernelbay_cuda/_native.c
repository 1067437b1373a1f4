/* The compiled form of kernelbay-cuda's native helpers, built by setup.py into the platform
 * wheel as kernelbay_cuda._kbcuda_native: _pool.c, _graphentry.c, _direct.c, _launch.c, _timer.c,
 * _cupti.c, _hostcopy.c, _stage.c and _stagerun.c as one translation unit, in the order native.py joins them
 * for the first-use build, plus SOURCE_SHA256 (the hash of that joined text, given by setup.py)
 * so that native.py can tell a prebuilt module whose sources have since changed (an editable
 * install after an edit) and build the current ones instead.
 */
#define PyInit__kbcuda_native kb_init_helpers
#include "_pool.c"
#include "_graphentry.c"
#include "_direct.c"
#include "_launch.c"
#include "_timer.c"
#include "_cupti.c"
#include "_hostcopy.c"
#include "_stage.c"
#include "_stagerun.c"
#undef PyInit__kbcuda_native

#ifndef KB_SOURCE_SHA256
#define KB_SOURCE_SHA256 "unknown"
#endif

PyMODINIT_FUNC PyInit__kbcuda_native(void) {
    PyObject *m = kb_init_helpers();
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA256", KB_SOURCE_SHA256) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
