/* The zygote's two halves (zygote.c: the control socket and each run; zygote_root.c:
 * the read-only root and the user namespace it is built in, once), and what they share. */
#ifndef PIEXP_ZYGOTE_H
#define PIEXP_ZYGOTE_H

/* The uid and gid every run has inside the sandbox (nobody), mapped to the host user. */
#define SANDBOX_ID 65534

/* Print why the zygote cannot go on (with errno's text) and exit 1. */
void die(const char *fmt, ...);
/* A user namespace in which this process is SANDBOX_ID, which no run may nest another in,
 * and a mount namespace of its own. */
void enter_user_namespace(void);
/* The read-only root from the command line's layout (argv as main's), made the root. */
void build_root(int argc, char **argv);

#endif
