/*
 * The exchange's lifetime rules (proxy/exchange/exchange_state.h): the table of legal
 * transitions, and the reference rule. Each bug case runs in a child that
 * breaks the rule on purpose; the child must abort (debug builds and tests)
 * and say what it broke on stderr.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exchange_state.h"
#include "unit.h"

/* Legal and illegal moves, read from the table. */
static const struct {
    const char *name;
    enum exchange_state from, to;
    bool legal;
} transition_cases[] = {
    { "new -> claiming", X_NEW, X_CLAIMING, true },
    { "forwarding -> writing", X_FORWARDING, X_WRITING, true },
    { "writing -> answered", X_WRITING, X_ANSWERED, true },
    { "writing -> answered-writing (a write sent again)", X_WRITING, X_ANSWERED_WRITING, true },
    { "answered-writing -> answered (the write landed)", X_ANSWERED_WRITING, X_ANSWERED, true },
};

static void run_transition_cases(void)
{
    for (size_t i = 0; i < sizeof transition_cases / sizeof transition_cases[0]; i++)
        UNIT_CHECK(transition_cases[i].name,
                   exchange_transition_check("t", transition_cases[i].from,
                                             transition_cases[i].to) ==
                       transition_cases[i].legal,
                   "table says otherwise");
    UNIT_CHECK("answered and answered-writing count as answered, writing does not",
               exchange_state_answered(X_ANSWERED) &&
                   exchange_state_answered(X_ANSWERED_WRITING) &&
                   !exchange_state_answered(X_WRITING),
               "exchange_state_answered disagrees");
}

/* Run fn in a child with stderr into a pipe; its wait status, and what it wrote. */
static int run_child(void (*fn)(void), char *err, size_t cap)
{
    int fds[2], status = 0;
    size_t len = 0;
    ssize_t n;

    if (pipe(fds) != 0)
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        signal(SIGABRT, SIG_DFL);
        fn();
        _exit(0);
    }
    close(fds[1]);
    while (len + 1 < cap && (n = read(fds[0], err + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    err[len] = '\0';
    close(fds[0]);
    waitpid(pid, &status, 0);
    return status;
}

/* Armed once, the callback runs once, then a second drop: one unref too many. */
static void drop_one_too_many(void)
{
    unsigned refs = 0;

    exchange_ref_take(&refs);
    if (!exchange_ref_drop(&refs, "rec1"))
        _exit(3); /* the last reference must say "none remain" */
    exchange_ref_drop(&refs, "rec1");
}

static void answered_then_forwarding(void)
{
    exchange_transition_check("rec2", X_ANSWERED, X_FORWARDING);
}

static void answered_writing_then_writing(void)
{
    exchange_transition_check("rec3", X_ANSWERED_WRITING, X_WRITING);
}

static void balanced(void)
{
    unsigned refs = 0;

    exchange_ref_take(&refs);
    exchange_ref_take(&refs);
    if (exchange_ref_drop(&refs, "rec4") || !exchange_ref_drop(&refs, "rec4"))
        _exit(3);
}

static const struct {
    const char *name;
    void (*fn)(void);
    bool aborts;
    const char *says; /* on stderr */
} bug_cases[] = {
    { "one unref too many aborts", drop_one_too_many, true, "a reference dropped that was not held" },
    { "answered -> forwarding aborts naming both states", answered_then_forwarding, true,
      "illegal transition answered -> forwarding" },
    { "answered-writing -> writing aborts naming both states", answered_writing_then_writing,
      true, "illegal transition answered-writing -> writing" },
    { "as many drops as takes: the last says none remain", balanced, false, "" },
};

static void run_bug_cases(void)
{
    char err[4096];

    for (size_t i = 0; i < sizeof bug_cases / sizeof bug_cases[0]; i++) {
        int st = run_child(bug_cases[i].fn, err, sizeof err);
        bool aborted = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
        bool clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;

        UNIT_CHECK(bug_cases[i].name,
                   (bug_cases[i].aborts ? aborted : clean) && strstr(err, bug_cases[i].says),
                   "wait status %d, stderr: %s", st, err);
    }
}

int main(void)
{
#ifdef NDEBUG
    printf("ok SKIP: built with NDEBUG, where a bug answers 500 instead of aborting\n");
    return 0;
#else
    run_transition_cases();
    run_bug_cases();
    UNIT_DONE();
#endif
}
