# shellcheck shell=bash
# Sourced by .ci/run (CI alone sets this up): the docker tier's daemon, private (own socket under /tmp),
# stopped by pid and removed when the CI shell exits. Where it cannot start, the tier's tests skip with a
# one-line reason. Only the docker tier gets its address (KIT_TEST_DOCKER_HOST): the unit tier's
# "no daemon" tests stay so.
dockerd_dir=$(mktemp -d /tmp/kit-dockerd-ci-XXXXXX)
trap 'bash .ci/dockerd.sh stop "$dockerd_dir"' EXIT
if docker_host=$(bash .ci/dockerd.sh start "$dockerd_dir"); then
    export KIT_TEST_DOCKER_HOST=${docker_host#DOCKER_HOST=}
else
    echo "docker tier: the private dockerd did not start (see $dockerd_dir/dockerd.log)"
fi
