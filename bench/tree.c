/* tree: build a process tree for guardian's benchmark harness (bench/run).
 *
 *   tree SHAPE N SIG END READYFILE
 *
 *   SHAPE      flat     the provider forks N sleepers
 *              chain    each process forks the next, N deep
 *              orphans  the provider double-forks N sleepers that call setsid()
 *                       (their intermediate parent exits, so they are orphaned)
 *   N          number of descendants (the provider itself is not counted)
 *   SIG        term     sleepers keep SIGTERM's default action (they die on it)
 *              ignore   sleepers ignore SIGTERM (only SIGKILL stops them)
 *   END        exit     the provider exits once all N descendants exist
 *              stay     the provider stays (pause()) once all N descendants exist
 *   READYFILE  once the tree is complete the provider writes its CLOCK_MONOTONIC
 *              time (seconds) there, just before it exits or pauses; "-" for none
 *
 * Sleepers never exec: they are forks of this small program blocked in pause().
 * The harness tags every process through the environment (BENCH_NONCE), which
 * fork() keeps, and cleans up by PID.  Exit status: 0 ok, 2 usage, 3 fork failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleeper(void)
{
	for (;;)
		pause();
}

static void ready(const char *path)
{
	struct timespec ts;
	char buf[64];
	int fd, len;

	if (strcmp(path, "-") == 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	len = snprintf(buf, sizeof buf, "%lld.%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, buf, len) != len)
			perror("tree: write readyfile");
		close(fd);
	}
}

static void fail(const char *what, long done)
{
	fprintf(stderr, "tree: %s failed after %ld descendants: %s\n", what, done, strerror(errno));
	_exit(3);
}

/* read exactly n bytes of 'R' from fd; any 'E' or EOF means a descendant failed */
static int await(int fd, long n)
{
	char buf[4096];
	while (n > 0) {
		ssize_t r = read(fd, buf, n < (long)sizeof buf ? (size_t)n : sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		if (memchr(buf, 'E', r))
			return -1;
		n -= r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	long n, i;
	int p[2], stay;
	pid_t pid;

	if (argc != 6) {
		fprintf(stderr, "usage: tree flat|chain|orphans N term|ignore exit|stay READYFILE\n");
		return 2;
	}
	n = atol(argv[2]);
	if (strcmp(argv[3], "ignore") == 0)
		signal(SIGTERM, SIG_IGN);
	else
		signal(SIGTERM, SIG_DFL);
	stay = strcmp(argv[4], "stay") == 0;
	if (pipe2(p, O_CLOEXEC) < 0)
		fail("pipe", 0);

	if (strcmp(argv[1], "flat") == 0) {
		for (i = 0; i < n; i++) {
			pid = fork();
			if (pid < 0)
				fail("fork", i);
			if (pid == 0) {
				close(p[0]);
				close(p[1]);
				sleeper();
			}
		}
	} else if (strcmp(argv[1], "chain") == 0) {
		int provider = 1;
		for (i = 0; i < n; i++) {
			pid = fork();
			if (pid < 0) {
				if (provider)
					fail("fork", i);
				if (write(p[1], "E", 1) < 0) {}
				sleeper();
			}
			if (pid > 0) {
				if (provider)
					break;
				close(p[0]);
				close(p[1]);
				sleeper();
			}
			provider = 0;
		}
		if (!provider) { /* the last link */
			close(p[0]);
			if (write(p[1], "R", 1) < 0) {}
			close(p[1]);
			sleeper();
		}
		close(p[1]);
		if (n > 0 && await(p[0], 1) < 0) {
			errno = EAGAIN;
			fail("chain", -1);
		}
	} else if (strcmp(argv[1], "orphans") == 0) {
		for (i = 0; i < n; i++) {
			pid = fork();
			if (pid < 0)
				fail("fork", i);
			if (pid == 0) {
				pid_t g = fork();
				if (g < 0) {
					if (write(p[1], "E", 1) < 0) {}
					_exit(1);
				}
				if (g > 0)
					_exit(0);
				close(p[0]);
				setsid();
				if (write(p[1], "R", 1) < 0) {}
				close(p[1]);
				sleeper();
			}
			while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
				;
		}
		close(p[1]);
		if (await(p[0], n) < 0) {
			errno = EAGAIN;
			fail("orphans", -1);
		}
	} else {
		fprintf(stderr, "tree: unknown shape %s\n", argv[1]);
		return 2;
	}
	ready(argv[5]);
	if (stay)
		sleeper();
	return 0;
}
