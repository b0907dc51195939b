/* The pod sandbox's process for Rivora's test cluster: it holds the pod's namespaces and does
 * nothing else. containerd starts one per pod (its sandbox image is the image built from this
 * file, see scripts/image), so no registry is needed.
 *
 * What it must do, as Kubernetes' own pause does: stay asleep, exit 0 on SIGINT or SIGTERM (a
 * pod being removed), and reap zombies when it is the pod's PID 1 (shared process namespace). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
	(void)sig;
	_exit(0);
}

static void reap(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("rivora-test-pause");
		return 0;
	}
	if (getpid() != 1)
		fprintf(stderr, "pause: not PID 1, zombies are not reaped here\n");
	struct sigaction term = {.sa_handler = stop};
	struct sigaction child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
	if (sigaction(SIGINT, &term, NULL) < 0 || sigaction(SIGTERM, &term, NULL) < 0 ||
	    sigaction(SIGCHLD, &child, NULL) < 0) {
		perror("pause: sigaction");
		return 1;
	}
	for (;;)
		pause();
}
