/*
 * unit.h - the few macros the table-driven unit tests share.
 * Each case prints "ok NAME" or "FAIL NAME: why"; main returns the failures.
 */
#ifndef IDEM_UNIT_H
#define IDEM_UNIT_H

#include <stdio.h>

static int unit_failures;

#define UNIT_CHECK(name, cond, ...)                                                           \
    do {                                                                                      \
        if (cond) {                                                                           \
            printf("ok %s\n", (name));                                                        \
        } else {                                                                              \
            unit_failures++;                                                                  \
            printf("FAIL %s: ", (name));                                                      \
            printf(__VA_ARGS__);                                                              \
            printf("\n");                                                                     \
        }                                                                                     \
    } while (0)

#define UNIT_DONE() return unit_failures == 0 ? 0 : 1

#endif
