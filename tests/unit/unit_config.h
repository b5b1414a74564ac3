/*
 * unit_config.h - one configuration case of a table-driven unit test (unit.h):
 * a YAML text loaded as the file FILE, which either loads and passes its
 * check, or is refused with "FILE:LINE: ..." holding a word. Header-only.
 */
#ifndef IDEM_UNIT_CONFIG_H
#define IDEM_UNIT_CONFIG_H

#include <stdbool.h>
#include <string.h>

#include "config.h"
#include "unit.h"

typedef void unit_config_check(const char *name, const struct config *cfg);

/*
 * Run the case name: yaml loaded as file; err_line 0: it must load, and
 * check (when not NULL) sees it; else it must fail at err_line with
 * err_word in the message. The message goes to err (errlen bytes) for the
 * caller's further checks; returns true when there is one to check.
 */
static inline bool unit_config_case(const char *file, const char *name, const char *yaml,
                                    int err_line, const char *err_word,
                                    unit_config_check *check, char *err, size_t errlen)
{
    struct config cfg;
    char prefix[64];
    int rc = config_load_string(&cfg, yaml, strlen(yaml), file, err, errlen);

    if (err_line == 0) {
        UNIT_CHECK(name, rc == 0, "did not load: %s", err);
        if (rc == 0) {
            if (check != NULL)
                check(name, &cfg);
            config_deinit(&cfg);
        }
        return false;
    }
    if (rc == 0) {
        config_deinit(&cfg);
        UNIT_CHECK(name, false, "loaded, expected an error at line %d", err_line);
        return false;
    }
    snprintf(prefix, sizeof(prefix), "%s:%d: ", file, err_line);
    UNIT_CHECK(name, strncmp(err, prefix, strlen(prefix)) == 0 && strstr(err, err_word) != NULL,
               "expected \"%s...%s...\", got \"%s\"", prefix, err_word, err);
    return true;
}

#endif
