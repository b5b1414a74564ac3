/*
 * trim.h - memory goes back to the system after a burst
 * (docs/operations.md#memory): the allocator is told to return the free
 * pages it keeps. Whoever runs the loops decides when (worker.c: every few
 * seconds while little is buffered); this file knows only how, for the
 * allocator the binary was linked with.
 */
#ifndef IDEM_TRIM_H
#define IDEM_TRIM_H

/*
 * Once, before any thread but the caller's allocates: mimalloc (the default
 * build) keeps the pages it frees mapped unless told to reset them
 * (measured: 30 MiB above idle, for good, after 1,000 connections with
 * 64 KiB heads), so page_reset is turned on. Nothing with another allocator.
 */
void trim_setup(void);

/*
 * Return the free pages the allocator keeps: mimalloc collects the calling
 * thread's heap (so each thread calls it for itself), glibc's malloc_trim
 * trims its arenas. Any thread.
 */
void trim_now(void);

#endif
