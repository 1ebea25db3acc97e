/* piexp sandbox zygote: builds the sandbox's read-only root once, then starts each run
 * in fresh namespaces inside it.
 *
 * Why: a bwrap per run builds the whole root again (a tmpfs, ~15 binds and remounts,
 * pivot_root, detaching the host's mount tree): ~4 ms of the ~6 ms of CPU that
 * isolation costs a run (bench/namespace_cost.py). Here that is done once; a run only
 * copies the small sandbox mount table into its own namespaces.
 *
 * Started by the server (piexp/sandbox/launchers/zygote_client.py) with a SOCK_SEQPACKET control socket
 * and the root's layout on the command line:
 *     piexp-zygote CONTROL_FD RUNS_DIR FILTER_FD [B SRC DST | S TARGET PATH | F SRC PATH]...
 * (B: read-only bind, S: symlink, F: a read-only copy of a file; FILTER_FD: a file
 * holding the runs' seccomp filter as classic BPF, read at start, or -1 for none). It
 * runs as the runs' unprivileged host user (a server running as root starts it so).
 * Set-up, once:
 *   - a user namespace in which this process is uid/gid 65534 (mapped to its own host
 *     uid, never host root), with its own user.max_user_namespaces set to 0, so no run
 *     can create a nested user namespace (what bwrap's --disable-userns achieves);
 *   - a mount namespace whose root is a read-only tmpfs holding the layout, a read-only
 *     /dev (null, zero, full, random, urandom, tty), empty mount points for /proc, /tmp
 *     and /sandbox, RUNS_DIR bound at /.runs (a slave of the host's mount: the tmpfs
 *     the server mounts there for each run appears here) and the host's /proc at
 *     /.proc (each run detaches both, see below).
 * Per request (one message of at most 64 KiB: fields separated by NUL, fds by
 * SCM_RIGHTS; at most 256 arguments, 256 environment entries, 16 rlimits, 15 fds):
 *     RUN_NAME TMP_NAME TMPFS_BYTES TMPFS_INODES WALL_S NLIMITS (RES SOFT HARD)* ARGC ARG* ENVC ENV*
 *     (TMP_NAME: a directory in RUNS_DIR bound at /tmp, or empty for a fresh tmpfs of
 *     TMPFS_BYTES and TMPFS_INODES; a negative rlimit value is RLIM_INFINITY; WALL_S:
 *     the init kills its namespace after that many seconds, a backstop behind the
 *     server's own timer)
 *     fds: stdin, stdout, stderr, a status pipe, then the files to write "0" to in order
 *          to join the run's cgroups (v1 `tasks`, v2 `cgroup.procs`, opened by the server)
 * A malformed request is answered "!malformed request" and starts nothing.
 * it clone()s with CLONE_PARENT, so the run's init is the *server's* child (the server
 * waits for and reaps it like any child), in new mount, pid, ipc, net and uts
 * namespaces, and answers with the init's pid (or "!reason"). The init, pid 1 of its
 * namespace: joins the cgroups, unshares a cgroup namespace rooted there, binds
 * /.runs/RUN_NAME at /sandbox (nosuid, nodev) and its /tmp, detaches /.runs (no other
 * run's directory is reachable), mounts its own /proc with /proc/sys, sysrq-trigger,
 * irq and bus read-only, then forks the program: new session, rlimits, no_new_privs,
 * an empty capability bounding set, no fds but 0-2, cwd /sandbox, the given
 * environment, the seccomp filter, execve. The init reaps everything and exits
 * with the program's status (128+signal if killed, as bwrap does); its exit kills
 * whatever is left in the pid namespace. A failed step is written to the status pipe
 * and no program is started. The zygote exits on EOF from the server (and with it:
 * PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include "zygote.h"

static int CTL_FD = -1;
static struct sock_fprog FILTER = {0, NULL}; /* the runs' seccomp filter (len 0: none) */
#define MAX_MSG 65536
#define MAX_FDS 16
#define MAX_ARGS 256

/* ------------------------------------------------------------------ one run */

struct request {
  const char *run_name;
  const char *tmp_name; /* "" : a fresh tmpfs with tmpfs_opts */
  char tmpfs_opts[96];
  unsigned wall_s;
  int nlimits;
  int limit_res[16];
  struct rlimit limits[16];
  char *argv[MAX_ARGS + 1];
  char *envp[MAX_ARGS + 1];
  int fds[MAX_FDS];
  int nfds;
};

static int status_fd = -1;

/* Say why a run could not start (to the server, through the status pipe) and stop. */
static void fail(const char *what) {
  char msg[512];
  int n = snprintf(msg, sizeof msg, "%s: %s", what, strerror(errno));
  if (status_fd >= 0 && n > 0 && write(status_fd, msg, (size_t)n) < 0) { /* nothing left to tell */ }
  _exit(125);
}

static long long parse_ll(const char *s) { return strtoll(s, NULL, 10); }

/* Fields in `buf` (NUL-separated) into `req`; 0, or -1 when malformed. */
static int parse(char *buf, size_t len, struct request *req) {
  char *fields[2 * MAX_ARGS + 64];
  size_t nf = 0;
  for (size_t start = 0, i = 0; i < len; i++) {
    if (buf[i] != 0) continue;
    if (nf == sizeof fields / sizeof *fields) return -1;
    fields[nf++] = buf + start;
    start = i + 1;
  }
  size_t k = 0;
#define NEXT() (k < nf ? fields[k++] : NULL)
  char *f;
  if (!(req->run_name = NEXT()) || !*req->run_name || strchr(req->run_name, '/') || req->run_name[0] == '.')
    return -1;
  if (!(req->tmp_name = NEXT()) || strchr(req->tmp_name, '/') || req->tmp_name[0] == '.') return -1;
  /* tmpfs reads size=0 and nr_inodes=0 as "no limit": both must be given. */
  char *size = NEXT(), *inodes = NEXT();
  if (!inodes || parse_ll(size) <= 0 || parse_ll(inodes) <= 0) return -1;
  snprintf(req->tmpfs_opts, sizeof req->tmpfs_opts, "mode=0755,size=%lld,nr_inodes=%lld", parse_ll(size),
           parse_ll(inodes));
  if (!(f = NEXT()) || parse_ll(f) < 0) return -1;
  req->wall_s = (unsigned)parse_ll(f);
  if (!(f = NEXT())) return -1;
  req->nlimits = (int)parse_ll(f);
  if (req->nlimits < 0 || req->nlimits > 16) return -1;
  for (int i = 0; i < req->nlimits; i++) {
    char *r = NEXT(), *s = NEXT(), *h = NEXT();
    if (!h) return -1;
    req->limit_res[i] = (int)parse_ll(r);
    long long sv = parse_ll(s), hv = parse_ll(h);
    req->limits[i].rlim_cur = sv < 0 ? RLIM_INFINITY : (rlim_t)sv;
    req->limits[i].rlim_max = hv < 0 ? RLIM_INFINITY : (rlim_t)hv;
  }
  char **lists[2] = {req->argv, req->envp};
  for (int l = 0; l < 2; l++) {
    if (!(f = NEXT())) return -1;
    long long n = parse_ll(f);
    if (n < 0 || n > MAX_ARGS || (l == 0 && n == 0)) return -1;
    for (long long i = 0; i < n; i++)
      if (!(lists[l][i] = NEXT())) return -1;
    lists[l][n] = NULL;
  }
#undef NEXT
  return k == nf ? 0 : -1;
}

/* Close every fd from `low` up, except `keep` (-1: none); one close_range(2) call where
 * the kernel has it (5.9+) instead of a close() per possible fd. */
static void close_range_or_loop(unsigned first, unsigned last) {
  if (first > last) return;
#ifdef SYS_close_range
  if (syscall(SYS_close_range, first, last, 0) == 0) return;
#endif
  for (unsigned fd = first; fd <= last && fd < 65536; fd++) close((int)fd);
}

static void close_from(int low, int keep) {
  if (keep >= low) {
    close_range_or_loop((unsigned)low, (unsigned)keep - 1);
    close_range_or_loop((unsigned)keep + 1, ~0U);
  } else {
    close_range_or_loop((unsigned)low, ~0U);
  }
}

static int exit_code(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

static void on_alarm(int sig) {
  (void)sig;
  kill(-1, SIGKILL); /* everything in this pid namespace but the init itself */
  _exit(128 + SIGKILL);
}

/* The program: pid 2 of the run's namespace. */
static void exec_program(struct request *req) {
  if (setsid() < 0) fail("setsid");
  for (int i = 0; i < 3; i++)
    if (dup2(req->fds[i], i) < 0) fail("dup2");
  if (chdir("/sandbox") < 0) fail("chdir /sandbox");
  for (int i = 0; i < req->nlimits; i++)
    if (setrlimit(req->limit_res[i], &req->limits[i]) < 0) fail("setrlimit");
  for (int cap = 0; cap <= 63; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) fail("drop capabilities");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail("no_new_privs");
  /* Only 0-2 and the status pipe (close-on-exec: it closes as the program starts). */
  close_from(3, status_fd);
  signal(SIGPIPE, SIG_DFL);
  /* Last, so that nothing above needs a syscall the filter refuses. */
  if (FILTER.len && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &FILTER, 0, 0) < 0) fail("seccomp filter");
  execve(req->argv[0], req->argv, req->envp);
  fail(req->argv[0]);
}

/* The run's init: pid 1 of the new pid namespace, the server's child. */
static void run_init(struct request *req) {
  status_fd = req->fds[3];
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) fail("pdeathsig");
  for (int i = 4; i < req->nfds; i++)
    if (write(req->fds[i], "0", 1) != 1) fail("join the run's cgroup");
  if (unshare(CLONE_NEWCGROUP) < 0) fail("unshare cgroup");
  if (setsid() < 0) fail("setsid");
  char path[4096];
  snprintf(path, sizeof path, "/.runs/%s", req->run_name);
  if (mount(path, "/sandbox", NULL, MS_BIND, NULL) < 0) fail("bind the run directory");
  if (mount(NULL, "/sandbox", NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
    fail("remount the run directory");
  if (*req->tmp_name) {
    snprintf(path, sizeof path, "/.runs/%s", req->tmp_name);
    if (mount(path, "/tmp", NULL, MS_BIND, NULL) < 0) fail("bind the run's /tmp");
    if (mount(NULL, "/tmp", NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0) fail("remount /tmp");
  } else if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, req->tmpfs_opts) < 0) {
    fail("mount /tmp");
  }
  if (umount2("/.runs", MNT_DETACH) < 0) fail("detach the runs directory");
  if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) fail("mount /proc");
  /* Host-global knobs the proc of a pid namespace still shows: read-only, as bwrap does. */
  static const char *covered[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"};
  for (size_t i = 0; i < sizeof covered / sizeof *covered; i++) {
    if (access(covered[i], F_OK) < 0) continue;
    if (mount(covered[i], covered[i], NULL, MS_BIND | MS_REC, NULL) < 0) fail("bind a /proc knob");
    if (mount(NULL, covered[i], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
      fail("make a /proc knob read-only");
  }
  if (umount2("/.proc", MNT_DETACH) < 0) fail("detach the host's /proc");
  pid_t program = fork();
  if (program < 0) fail("fork");
  if (program == 0) exec_program(req);
  /* The init keeps no fd of the run's: pipes close as soon as the program's side does. */
  close_from(0, -1);
  status_fd = -1;
  if (req->wall_s) {
    signal(SIGALRM, on_alarm);
    alarm(req->wall_s);
  }
  for (;;) {
    int status;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid == program) _exit(exit_code(status));
    if (pid < 0 && errno != EINTR) _exit(1);
  }
}

static void reply(const char *text) {
  if (send(CTL_FD, text, strlen(text), MSG_NOSIGNAL) < 0) _exit(0); /* the server is gone */
}

static void serve(void) {
  static char buf[MAX_MSG];
  for (;;) {
    struct request req;
    memset(&req, 0, sizeof req);
    char control[CMSG_SPACE(sizeof(int) * MAX_FDS)];
    struct iovec iov = {buf, sizeof buf - 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    ssize_t n = recvmsg(CTL_FD, &msg, MSG_CMSG_CLOEXEC);
    if (n == 0) _exit(0);
    if (n < 0) {
      if (errno == EINTR) continue;
      _exit(0);
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < count; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (req.nfds < MAX_FDS)
          req.fds[req.nfds++] = fd;
        else
          close(fd); /* more than a request may carry: refused below */
      }
    }
    if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || req.nfds < 4 || req.nfds == MAX_FDS ||
        parse(buf, (size_t)n, &req) < 0) {
      reply("!malformed request");
    } else {
      /* The run's fds must survive into the init (received close-on-exec: clear). */
      for (int i = 0; i < req.nfds; i++) fcntl(req.fds[i], F_SETFD, i == 3 ? FD_CLOEXEC : 0);
      long pid = syscall(SYS_clone, CLONE_PARENT | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET |
                                        CLONE_NEWUTS | SIGCHLD, 0, 0, 0, 0);
      if (pid == 0) {
        close(CTL_FD);
        run_init(&req);
      }
      char text[64];
      if (pid < 0)
        snprintf(text, sizeof text, "!clone: %s", strerror(errno));
      else
        snprintf(text, sizeof text, "%ld", pid);
      reply(text);
    }
    for (int i = 0; i < req.nfds; i++) close(req.fds[i]);
  }
}

/* The filter's instructions from `fd` (classic BPF, as libseccomp exports it). */
static void read_filter(int fd) {
  static struct sock_filter code[BPF_MAXINSNS];
  size_t got = 0;
  for (;;) {
    if (got == sizeof code) {
      errno = E2BIG;
      die("read the seccomp filter");
    }
    ssize_t n = read(fd, (char *)code + got, sizeof code - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("read the seccomp filter");
    if (n == 0) break;
    got += (size_t)n;
  }
  close(fd);
  if (got == 0 || got % sizeof *code) {
    errno = EINVAL;
    die("the seccomp filter is empty or truncated");
  }
  FILTER.len = (unsigned short)(got / sizeof *code);
  FILTER.filter = code;
}

int main(int argc, char **argv) {
  if (argc < 4 || (argc - 4) % 3 != 0 || (CTL_FD = atoi(argv[1])) < 3) {
    fprintf(stderr, "usage: piexp-zygote CONTROL_FD RUNS_DIR FILTER_FD [B SRC DST | S TARGET PATH | F SRC PATH]...\n");
    return 2;
  }
  if (atoi(argv[3]) >= 0) read_filter(atoi(argv[3]));
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) die("pdeathsig");
  if (getppid() == 1) return 0; /* the server is already gone */
  signal(SIGPIPE, SIG_IGN);
  enter_user_namespace();
  build_root(argc, argv);
  reply("ready");
  serve();
  return 0;
}
