// kernelbay CPU backend: the interface between kernel modules and the process-wide runtime
// (kb_cpu_rt.cpp: Ctrl-C cancellation, fault reports naming the kernel, fork handling). A module
// gets the runtime at load (kb_set_runtime); without one, launches run as before.
#pragma once

#include <csetjmp>
#include <cstddef>

#define KB_CPU_RT_VERSION 2

namespace kb_cpu {

// A thread's fiber stacks while it runs a block (kb_cpu_fiber.h): a fault on one of their guard
// pages (the first `page` bytes of every `stride`) is a fiber stack overflow.
struct Guard {
    char* stacks;
    std::size_t map_bytes, stride, page;
    sigjmp_buf* overflow;  // where the fault handler jumps
};

struct Runtime {
    int version;
    long* interrupts;  // bumped by each Ctrl-C that cancels running launches
    int* forked;       // nonzero in a fork()ed child
    // A launch starts: kernel name, int[6] geometry, and a function giving the calling thread's
    // blockIdx. Returns a slot for leave().
    int (*enter)(const char* name, const int* geom, void (*where)(unsigned*));
    void (*leave)(int slot);
    // Whether this thread must not open a parallel region (it fork()ed: its OpenMP pool is gone).
    int (*must_move)();
    // Run fn(ctx) on the runtime's own thread and return its result.
    int (*run_elsewhere)(int (*fn)(void*), void* ctx);
    // Once per thread: an alternate signal stack, so a stack overflow is reported too.
    void (*thread_setup)();
    // The calling thread runs fibers on g's stacks (nullptr: no longer). The SIGSEGV handler
    // that turns a guard-page fault into an error lives here, in the runtime, which is never
    // unloaded: a handler in a kernel module would dangle once that module is unloaded.
    void (*guard)(const Guard* g);
};

//: the status of a launch whose blocks were cancelled by Ctrl-C (kernelbay_cpu._driver.CANCELLED)
constexpr int CANCELLED = 2;

}  // namespace kb_cpu
