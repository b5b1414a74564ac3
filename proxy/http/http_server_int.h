/*
 * http_server_int.h - the state of http_server.c's connections and requests,
 * shared with http_server_parse.c (the parser's callbacks). Private to http/.
 */
#ifndef IDEM_HTTP_SERVER_INT_H
#define IDEM_HTTP_SERVER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include <http_parser.h>

#include "http_server.h"

enum http_conn_state { CONN_HEAD, CONN_BODY, CONN_HANDLER, CONN_WRITING, CONN_LINGER };

struct http_conn;

struct http_req {
    struct http_conn *conn;             /* NULL once the client went away */
    enum evhttp_cmd_type command;
    char *target;                       /* owned */
    struct evhttp_uri *uri;             /* owned */
    struct evkeyvalq in, out, trailers;
    struct evbuffer *body;
    size_t body_limit;                  /* bytes the head callback accepted */
    long long content_length;           /* -1 chunked */
    int status;
    int major, minor;                   /* HTTP version */
    bool close;                         /* http_server_close_after */
    void *attached;                     /* http_server_attach */
    void (*release)(void *attached);
    bool answered;
    void (*done)(struct http_req *req, bool written, void *arg);
    void *done_arg;
    char peer[64];
    /* streaming (http_server_stream.c) */
    bool held;                          /* the handler holds it from its head: never freed here */
    size_t window;                      /* a streamed body: bytes that may wait in body; 0: whole */
    bool body_complete;                 /* its last byte was read */
    bool readable_due;                  /* readable runs at the next kick */
    void (*readable)(struct http_req *req, void *arg);
    void *readable_arg;
    bool replying;                      /* a streamed answer has begun */
    bool chunked_out;                   /* ... in chunked framing */
    bool bodiless_out;                  /* ... without a body (HEAD, 1xx, 204, 304) */
    void (*writable)(struct http_req *req, void *arg);
    void *writable_arg;
};

struct http_conn {
    struct http_server *server;
    LIST_ENTRY(http_conn) next;
    struct bufferevent *bev;
    struct event *deadline;             /* the head's, then the linger's */
    struct event *kick;                 /* deferred work from the loop (http_conn_kick) */
    enum http_conn_state state;
    http_parser parser;
    struct http_req *req;               /* the one being read or answered, or NULL */
    struct evbuffer *field, *value;     /* the field being read */
    bool in_value;
    bool line_done;                     /* a field began: the request line was read */
    bool eof;                           /* the client closed its side: answer, then close */
    size_t head_bytes;
    size_t lingered;                    /* bytes dropped in LINGER */
    unsigned fields;
    bool head_done, message_done, too_large, head_error;
    bool close_after;                   /* the connection ends after this answer */
    bool body_full;                     /* a streamed body's window is full: parsing waits */
    bool body_grew;                     /* body bytes arrived since readable last ran */
    bool failed;                        /* a streamed body could not be read on: ends at the kick */
    const char *seg, *seg_end;          /* the bytes being parsed (http_server_parse.c checks) */
    unsigned crlf_at;                   /* 0, or 1 + the index in "\r\n" of the next byte of a
                                           chunk's closing CRLF still to check */
    bool bad_chunk;                     /* a chunk's data is not followed by CRLF */
    double head_since_ms;               /* monotonic: since it waits for this head */
    char peer[64];
};

struct http_server {
    struct event_base *base;
    struct evconnlistener *lev;
    struct event *resume;               /* accept errors: re-enable after a pause */
    struct http_server_limits limits;
    struct http_server_callbacks cb;
    http_parser_settings settings;
    LIST_HEAD(, http_conn) conns;
    unsigned n_conns;
    unsigned long long refused;         /* closed at once at the cap */
    bool paused;                        /* by an accept error */
    bool accepting;                     /* the listener is enabled */
};

/* A request on c (its fields empty); NULL when out of memory. */
struct http_req *http_req_new(struct http_conn *c);

/* Free req and everything it owns; NULL is fine. */
void http_req_free(struct http_req *req);

/*
 * Free c now (http_server.c). A request its handler holds stays the
 * handler's (answered later into nothing); one being read or written is
 * told and freed.
 */
void http_conn_free(struct http_conn *c);

/*
 * Have c's deferred work run from the event loop, outside the caller's
 * stack (http_server.c): parse on after a streamed body's window emptied,
 * call the readable callback, finish an answer whose last byte is out.
 */
void http_conn_kick(struct http_conn *c);

/*
 * Whether c ends after req's answer: c->close_after is set when the client
 * asked, HTTP/1.0 without keep-alive, http_server_close_after, or a
 * half-closed client with nothing more pipelined (http_server.c).
 */
void http_conn_end_after(struct http_conn *c, const struct http_req *req);

/*
 * The status line and fields of req's answer into c's output, framed by
 * content_length (bytes; -1: none) or chunked, with the Connection field
 * c->close_after says. Returns 0, or -1 when out of memory.
 */
int http_conn_write_head(struct http_conn *c, const struct http_req *req, const char *reason,
                         long long content_length, bool chunked);

/*
 * Write what c's output holds now, as far as the socket takes it; the rest
 * waits for the write event. An answer whose last byte is out (state
 * WRITING) is finished from the loop (http_server.c).
 */
void http_conn_flush(struct http_conn *c);

/*
 * Before parsing the bytes at c->seg: check the rest of a chunk's closing
 * CRLF that the previous bytes ended inside (http_server_parse.c). Returns
 * -1 (c->bad_chunk set) when it is not there.
 */
int http_server_crlf_check(struct http_conn *c);

/* Fill settings with the parser callbacks of http_server_parse.c (parser.data is the http_conn). */
void http_server_parser_settings(http_parser_settings *settings);

#endif
