/* sigstack.h - an alternate signal stack for the calling thread, so that a signal
 * handled while the thread runs oneDNN's JIT GEMM kernels does not land on the heap.
 * oneDNN's generated f32 GEMM kernels (jit_avx2_gemm_f32, jit_avx512_common_gemm_f32,
 * and the kernels that call them) point rsp at a heap workspace while they run; the
 * kernel writes a signal's frame at rsp, over the heap. Every handler stoke installs
 * therefore has SA_ONSTACK, and every thread that runs oneDNN has an alternate stack:
 * the main thread (src/cli/main.c), the OpenMP teams the CPU backend runs (its thread
 * setting) and a Python caller's thread (the same path). oneDNN issue #4845, fixed by
 * its PR #4855 (3.11); Debian 12 ships oneDNN 2.6. Internal. */
#ifndef STOKE_CORE_SIGSTACK_H
#define STOKE_CORE_SIGSTACK_H

/* Gives the calling thread an alternate signal stack unless it has one (its own or one
 * the program set, such as Python's faulthandler); released when the thread exits.
 * 0, or -1 when none could be made (errno set): handlers then run on the thread's
 * stack, as without this module. Async-signal-unsafe; thread-safe. */
int stoke_sigstack_ensure(void);

/* The size of the stacks this module makes, in bytes. */
unsigned long stoke_sigstack_bytes(void);

#endif
