/*
 * trim.c - the allocator returns its free pages (trim.h). mimalloc's
 * symbols are weak: a build with another allocator links no mimalloc, and
 * glibc's malloc_trim does the work (a no-op under jemalloc's own malloc).
 */
#include "trim.h"

#include <malloc.h>
#include <stddef.h>

#if __has_include(<mimalloc.h>)
#include <mimalloc.h>
#pragma weak mi_collect
#pragma weak mi_option_enable
#define TRIM_MIMALLOC 1
#endif

void trim_setup(void)
{
#ifdef TRIM_MIMALLOC
    if (mi_option_enable != NULL)
        mi_option_enable(mi_option_page_reset);
#endif
}

void trim_now(void)
{
#ifdef TRIM_MIMALLOC
    if (mi_collect != NULL) {
        mi_collect(true);
        return;
    }
#endif
    malloc_trim(0);
}
