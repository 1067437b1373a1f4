// kernelbay CPU backend: the interface between kernel modules and the process-wide runtime
// (kb_cpu_rt.cpp: Ctrl-C cancellation, fault reports naming the kernel, fork handling). A module
// gets the runtime at load (kb_set_runtime); without one, launches run as before.
#pragma once

#include <csetjmp>
#include <cstddef>

#define KB_CPU_RT_VERSION 5

namespace kb_cpu {

// A thread's fiber stacks while it runs a block (kb_cpu_fiber.h): a fault on one of their guard
// pages (the first `page` bytes of every `stride`) is a fiber stack overflow.
struct Guard {
    char* stacks;
    std::size_t map_bytes, stride, page;
    sigjmp_buf* overflow;  // where the fault handler jumps
};

// What the fault handler saw when it stopped a block (Runtime::protect).
struct Fault {
    int sig;     // SIGSEGV, SIGBUS, SIGFPE or SIGILL
    int code;    // its si_code (SEGV_MAPERR, FPE_INTDIV...)
    void* addr;  // si_addr: the address accessed (SIGSEGV, SIGBUS) or the instruction (SIGFPE, SIGILL)
    void* pc;    // the faulting instruction, where the platform says (else nullptr)
    void* sp;    // the stack pointer at the fault, where the platform says (else nullptr)
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
    // The calling thread runs kernel code of the launch whose cancel word is `cancel` (jb, f,
    // cancel), or no longer does (nullptr, nullptr, nullptr). While it does, a fault raised by
    // that code on this thread (SIGSEGV, SIGBUS, SIGFPE, SIGILL; not one sent by kill) fills *f
    // and siglongjmps to *jb with the signal number, and so does the runtime's stop signal once
    // *cancel is set (Ctrl-C, a deadline): f->sig is then stop_signal. The signal (and SIGINT)
    // may still be blocked on this thread after the jump: the caller unblocks them.
    void (*protect)(sigjmp_buf* jb, Fault* f, const int* cancel);
    // The cancel word of a launch (enter's slot; a word that stays 0 for slot -1): 0 while it
    // runs, CANCELLED after Ctrl-C, TIMEOUT once its deadline passed.
    const int* (*cancel_word)(int slot);
    // Stop the launch in `slot` if it still runs `ms` milliseconds from now (a watchdog thread
    // sets its cancel word to TIMEOUT and stops its running blocks).
    void (*set_deadline)(int slot, long ms);
    int stop_signal;  // the real-time signal that stops a running block
    // Run fn(ctx, c) for c in [0, n) on up to `threads` threads, the caller's included, and
    // return 0 once all ran; -1 when nothing ran (the pool is busy with another launch): the
    // caller then uses OpenMP. Null where the runtime has no pool (not Linux).
    int (*parallel)(int threads, long n, void (*fn)(void* ctx, long c), void* ctx);
    // The calling thread's fiber stacks, shared by every kernel module of the process: at least
    // `n` stacks of `stride` bytes, each above a PROT_NONE guard page of `page` bytes, in one
    // mapping of *map_bytes bytes (remapped when too small or of another stride; nullptr when it
    // cannot be mapped). Every guard page is a mapping of its own, so a set of 1024 stacks is
    // 2048 of the process's mappings (Linux allows about 65,000): one set per thread, not one per
    // thread and module.
    char* (*fiber_stacks)(std::size_t stride, std::size_t page, int n, std::size_t* map_bytes);
};

//: the status of a launch whose blocks were cancelled by Ctrl-C (kernelbay_cpu._driver.CANCELLED)
constexpr int CANCELLED = 2;
//: a launch stopped by a fault in its kernel code (kernelbay_cpu._driver.FAULT)
constexpr int FAULT = 3;
//: a launch stopped at its deadline (KERNELBAY_CPU_TIMEOUT; kernelbay_cpu._driver.TIMEOUT)
constexpr int TIMEOUT = 4;

}  // namespace kb_cpu
