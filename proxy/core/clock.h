/*
 * clock.h - the two clocks the proxy reads, and libevent's time type.
 *
 * The wall clock stamps records and lease deadlines, which other instances
 * read (so they must agree: NTP); the monotonic clock times what one process
 * measures for itself (latencies, idle connections).
 */
#ifndef IDEM_CLOCK_H
#define IDEM_CLOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/time.h>

/* Wall clock, ms since the Unix epoch. */
uint64_t clock_now_ms(void);

/* Monotonic clock, ms since an arbitrary start (CLOCK_MONOTONIC). */
double clock_mono_ms(void);

/* ms as a struct timeval for libevent timers (event_add, evtimer_add). */
struct timeval clock_ms_to_timeval(uint64_t ms);

/*
 * text (NUL-terminated, borrowed) as UTC in RFC 3339 section 5.6's
 * `YYYY-MM-DDTHH:MM:SSZ` form only (no fraction, no offset) into *ms, ms
 * since the Unix epoch (1970 or later): true. False for anything else,
 * including a time that does not exist (2026-02-30, a 24th hour): parsed
 * with strptime and timegm, and accepted only if strftime writes the same
 * text back. Pure.
 */
bool clock_parse_utc(const char *text, uint64_t *ms);

#endif
