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
};

struct http_conn {
    struct http_server *server;
    LIST_ENTRY(http_conn) next;
    struct bufferevent *bev;
    struct event *deadline;             /* the head's, then the linger's */
    enum http_conn_state state;
    http_parser parser;
    struct http_req *req;               /* the one being read or answered, or NULL */
    struct evbuffer *field, *value;     /* the field being read */
    struct evbuffer *raw;               /* the head's bytes as read (http_wire_head_fault) */
    bool in_value;
    bool line_done;                     /* a field began: the request line was read */
    bool eof;                           /* the client closed its side: answer, then close */
    size_t head_bytes;
    size_t lingered;                    /* bytes dropped in LINGER */
    unsigned fields;
    bool head_done, message_done, too_large, head_error;
    bool close_after;                   /* the connection ends after this answer */
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

/* Fill settings with the parser callbacks of http_server_parse.c (parser.data is the http_conn). */
void http_server_parser_settings(http_parser_settings *settings);

#endif
