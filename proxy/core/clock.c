/*
 * clock.c - wall and monotonic clocks; see clock.h.
 */
#include "clock.h"

#include <string.h>
#include <time.h>

uint64_t clock_now_ms(void)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

double clock_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

struct timeval clock_ms_to_timeval(uint64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000 };

    return tv;
}

bool clock_parse_utc(const char *text, uint64_t *ms)
{
    static const char form[] = "%Y-%m-%dT%H:%M:%SZ";
    struct tm tm = { 0 };
    char again[32];
    const char *end = strptime(text, form, &tm);
    time_t t;

    if (end == NULL || *end != '\0')
        return false;
    t = timegm(&tm);
    if (t < 0 || gmtime_r(&t, &tm) == NULL || strftime(again, sizeof(again), form, &tm) == 0 ||
        strcmp(again, text) != 0)
        return false;
    *ms = (uint64_t)t * 1000;
    return true;
}
