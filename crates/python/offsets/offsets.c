/* Prints the CPython struct offsets whyslow reads (crates/python/src/layout.rs), from the headers of the
 * Python it is compiled against (with Py_BUILD_CORE: the interpreter's internal structs). Run by
 * gen.sh, once per version; never part of the build. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030b0000
#include <internal/pycore_frame.h>
#include <internal/pycore_code.h>
#else
#include <frameobject.h>
#endif
#if PY_VERSION_HEX >= 0x03090000
#include <internal/pycore_interp.h>
#endif
#include <internal/pycore_pystate.h>
#if PY_VERSION_HEX >= 0x03090000
#include <internal/pycore_runtime.h>
#endif

#define P(name, value) printf("        %s: %lu,\n", name, (unsigned long)(value))

int main(void)
{
	printf("    Layout {\n        minor: %d,\n", PY_MINOR_VERSION);
	P("runtime_interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
	P("interp_next", offsetof(PyInterpreterState, next));
#if PY_VERSION_HEX >= 0x030b0000
	P("interp_threads_head", offsetof(PyInterpreterState, threads.head));
#else
	P("interp_threads_head", offsetof(PyInterpreterState, tstate_head));
#endif
	P("tstate_next", offsetof(PyThreadState, next));
	P("tstate_thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030d0000
	P("tstate_frame", offsetof(PyThreadState, current_frame));
	printf("        cframe_current_frame: None,\n");
#elif PY_VERSION_HEX >= 0x030b0000
	P("tstate_frame", offsetof(PyThreadState, cframe));
	printf("        cframe_current_frame: Some(%lu),\n", (unsigned long)offsetof(_PyCFrame, current_frame));
#else
	P("tstate_frame", offsetof(PyThreadState, frame));
	printf("        cframe_current_frame: None,\n");
#endif
#if PY_VERSION_HEX >= 0x030b0000
	P("frame_previous", offsetof(_PyInterpreterFrame, previous));
#if PY_VERSION_HEX >= 0x030d0000
	P("frame_code", offsetof(_PyInterpreterFrame, f_executable));
	P("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#else
	P("frame_code", offsetof(_PyInterpreterFrame, f_code));
	P("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
#endif
#if PY_VERSION_HEX >= 0x030c0000
	P("frame_owner", offsetof(_PyInterpreterFrame, owner));
#else
	P("frame_owner", offsetof(_PyInterpreterFrame, is_entry));
#endif
	P("code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
	P("code_qualname", offsetof(PyCodeObject, co_qualname));
	P("code_linetable", offsetof(PyCodeObject, co_linetable));
#else
	P("frame_previous", offsetof(PyFrameObject, f_back));
	P("frame_code", offsetof(PyFrameObject, f_code));
	P("frame_instr", offsetof(PyFrameObject, f_lasti));
	P("frame_owner", 0);
	P("code_adaptive", 0);
	P("code_qualname", 0);
#if PY_VERSION_HEX >= 0x030a0000
	P("code_linetable", offsetof(PyCodeObject, co_linetable));
#else
	P("code_linetable", offsetof(PyCodeObject, co_lnotab));
#endif
#endif
	P("code_name", offsetof(PyCodeObject, co_name));
	P("code_filename", offsetof(PyCodeObject, co_filename));
	P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
	P("bytes_size", offsetof(PyVarObject, ob_size));
	P("bytes_data", offsetof(PyBytesObject, ob_sval));
	P("unicode_length", offsetof(PyASCIIObject, length));
	P("unicode_state", offsetof(PyASCIIObject, hash) + sizeof(Py_hash_t));
	P("unicode_ascii_data", sizeof(PyASCIIObject));
	P("unicode_compact_data", sizeof(PyCompactUnicodeObject));
	P("type_name", offsetof(PyTypeObject, tp_name));
	printf("    },\n");
	return 0;
}
