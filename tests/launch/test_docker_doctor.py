"""`kit doctor`'s Docker lines beyond the daemon: the kit's llama.cpp images and whether a GPU request is
honoured, each with its fix. The refusal text is dockerd 20.10's own, seen on a daemon without the NVIDIA
toolkit; the image identity is the real CPU image's (tests/docker builds it)."""

from __future__ import annotations

from dataclasses import replace

from kit.app import doctor
from kit.launch.docker import docker_doctor
from tests.test_doctor import GPU_DOCKER, by_name, make_probes

from .test_docker_run import CPU_LABELS

CPU_IMAGE = {"reference": "kit/llamacpp:7e4c0a9-cpu", "id": "sha256:" + "3c" * 32, "target": "cpu",
             "base": CPU_LABELS["kit.image.base"], "llamacpp_commit": CPU_LABELS["kit.llamacpp.commit"],
             "wheel_sha256": CPU_LABELS["kit.wheel.sha256"], "cpu_backend": "portable",
             "cpu_backend_sha256": CPU_LABELS["kit.cpu.backend.sha256"]}
REFUSED = ('500 Server Error for http+docker://localhost/v1.41/containers/abc/start: Internal Server Error '
           '("could not select device driver "" with capabilities: [[gpu]]")')


def _checks(tmp_path, images, gpu_request):
    probes = replace(make_probes(tmp_path, docker=lambda: GPU_DOCKER), docker_llamacpp_images=lambda: images,
                     docker_gpu_request=gpu_request)
    return by_name(doctor.run_checks(probes, (), start_engine=False))


def _refuse(image):
    raise RuntimeError(REFUSED)


def test_images_present_and_a_gpu_request_honoured(tmp_path):
    asked = []
    checks = _checks(tmp_path, [CPU_IMAGE], asked.append)
    images = checks["llamacpp images"]
    assert images.status == doctor.OK and "target cpu" in images.detail and "portable CPU backend" in images.detail
    assert checks["gpu request"].status == doctor.OK and asked == ["kit/llamacpp:7e4c0a9-cpu"]


def test_a_refused_gpu_request_says_why_and_how_to_fix_it(tmp_path):
    check = _checks(tmp_path, [CPU_IMAGE], _refuse)["gpu request"]
    assert check.status == doctor.MISSING and check.detail.startswith("refused (could not select device driver")
    assert check.fix == docker_doctor.TOOLKIT_FIX and "--gpus none" in check.line()


def test_no_image_yet_names_the_build_command(tmp_path):
    checks = _checks(tmp_path, [], _refuse)
    assert checks["llamacpp images"].status == doctor.WARN
    assert "kit images build llamacpp --target cpu" in checks["llamacpp images"].line()
    assert checks["gpu request"].status == doctor.WARN  # nothing to start: not proven either way


def test_without_a_daemon_both_say_so(tmp_path):
    checks = by_name(doctor.run_checks(make_probes(tmp_path), (), start_engine=False))
    assert "without a Docker daemon" in checks["llamacpp images"].detail
    assert checks["gpu request"].status == doctor.MISSING


def test_the_cpu_container_way_opens_with_a_daemon_and_the_cpu_image(tmp_path):
    cpu_only = replace(make_probes(tmp_path, docker=lambda: {"ServerVersion": "20.10.24", "Runtimes": {"runc": {}}}),
                       docker_llamacpp_images=lambda: [CPU_IMAGE], docker_gpu_request=lambda image: None)
    checks = doctor.run_checks(cpu_only, (), start_engine=False)
    assert by_name(checks)["cpu image"].status == doctor.OK
    assert doctor.DOCKER_CPU_WAY in doctor.runnable(checks) and doctor.DOCKER_WAY not in doctor.runnable(checks)
    without = doctor.run_checks(replace(cpu_only, docker_llamacpp_images=lambda: []), (), start_engine=False)
    assert doctor.DOCKER_CPU_WAY not in doctor.runnable(without)
    assert "kit images build llamacpp --target cpu" in doctor.blocking(without, doctor.DOCKER_CPU_WAY).line()


def test_the_launcher_runs_the_cpu_container_with_its_image_and_no_gpu(tmp_path):
    from kit.tui import form  # noqa: PLC0415
    from kit.tui.catalog import Capabilities  # noqa: PLC0415

    choice = form.choice_of("llamacpp-cpu-container")
    assert choice.doctor_way == doctor.DOCKER_CPU_WAY
    assert form.usable_engine("reset", Capabilities((doctor.DOCKER_CPU_WAY,))) == "llamacpp-cpu-container"
    setup = form.defaults("reset", "reset", {}, tmp_path)
    setup.engine = "llamacpp-cpu-container"
    options = form.run_options(setup)
    assert (options.launcher, options.image, options.gpus) == ("docker", "kit/llamacpp:7e4c0a9-cpu", "none")
