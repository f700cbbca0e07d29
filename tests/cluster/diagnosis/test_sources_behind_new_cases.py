"""Kinds of text the corpus's fifth gathering (e- cases, development part) showed the table
lacked, each as its project's source writes it: a refused request's error body as a client
prints it, a JIT build with no CUDA toolkit in the image, FlashInfer's all-reduce workspace
that vLLM goes on without, and Ray's worker killed under it."""

from __future__ import annotations

import pytest

from cluster.diagnosis.explain import explain
from cluster.diagnosis.failures import SIGNATURES
from cluster.diagnosis.families import family_of_exception
from cluster.diagnosis.tracebacks import raised_exception
from cluster.logs.logtext import strip_prefixes
from tests.cluster.diagnosis.test_families_from_source import vllm
from tests.cluster.diagnosis.test_healthy_end_and_ranks import HEALTHY, READY


@pytest.mark.parametrize(
    "body",
    [
        # older releases' protocol.py ErrorResponse (`object: "error"` beside its fields)
        '{"object":"error","message":"Cannot use chat template functions because '
        "tokenizer.chat_template is not set and no template argument was passed! For "
        "information about writing templates and setting the tokenizer.chat_template "
        'attribute, please see the documentation","type":"BadRequestError","param":null,'
        '"code":400}',
        # vLLM 0.32.0 entrypoints/serve/engine/protocol.py ErrorResponse(error=ErrorInfo(...))
        '{"error":{"message":"Cannot use chat template functions because '
        'tokenizer.chat_template is not set and no template argument was passed!",'
        '"type":"BadRequestError","param":null,"code":400}}',
    ],
)
def test_the_error_body_a_client_printed_is_the_first_error_and_its_text_the_family(body):
    # transformers 5.19.0 tokenization_utils_base.py get_chat_template raises the message
    explained = explain(
        [
            body,
            vllm("ERROR", "Error in preprocessing prompt inputs", "serving_chat.py:222"),
            vllm("ERROR", "Traceback (most recent call last):", "serving_chat.py:222"),
        ]
    )
    assert explained.verdict == "failed"
    assert explained.diagnosis is not None and explained.diagnosis.family == "tokenizer"
    assert explained.diagnosis.evidence == body


@pytest.mark.parametrize(
    "line",
    [
        # FlashInfer jit/cpp_ext.py get_cuda_path, as vLLM's FlashInfer sampler raises it
        "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist",
        # torch 2.13.0 torch/utils/cpp_extension.py _join_cuda_home
        "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install "
        "root.",
    ],
)
def test_a_jit_build_with_no_cuda_toolkit_in_the_image_is_the_images_packages(line):
    raised = raised_exception(line)
    assert raised is not None and family_of_exception(raised) == "package_version"


def test_a_kernel_shape_flashinfers_dispatch_has_no_valid_traits_for_is_the_gpus():
    # flashinfer-ai/flashinfer include/flashinfer/attention/prefill.cuh: the dispatch's
    # `if constexpr (KTraits::IsInvalid())` branch (shared memory and registers of this GPU)
    line = (
        "RuntimeError: Error in function 'BatchPrefillWithPagedKVCacheDispatched' at "
        "/usr/local/lib/python3.12/dist-packages/flashinfer/data/include/flashinfer/attention/"
        "prefill.cuh:2978: FlashInfer Internal Error: Invalid configuration : NUM_MMA_Q=1 "
        "NUM_MMA_D_QK=32 NUM_MMA_D_VO=32 NUM_MMA_KV=1 NUM_WARPS_Q=1 NUM_WARPS_KV=4 please create "
        "an issue (https://github.com/flashinfer-ai/flashinfer/issues) and report the issue to "
        "the developers."
    )
    raised = raised_exception(line)
    assert raised is not None and family_of_exception(raised) == "gpu_arch"


def test_flashinfers_all_reduce_workspace_vllm_goes_on_without_fails_nothing():
    # vLLM 0.32.0 flashinfer_all_reduce.py: logger.warning_once(...), then `return None`; the
    # record's further lines are the JIT build's output
    worker = "(Worker_TP0 pid=3438584) "
    record = [
        worker
        + vllm(
            "WARNING",
            "Failed to initialize FlashInfer All Reduce workspace: Ninja build failed. Ninja "
            "output:",
            "flashinfer_all_reduce.py:72",
        ),
        worker + "FAILED: trtllm_allreduce.cuda.o",
        worker + "ninja: build stopped: subcommand failed.",
    ]
    explained = explain([*HEALTHY[:READY], *record, *HEALTHY[READY:]])
    assert explained.verdict == "healthy", explained.why
    assert any(m.row == "flashinfer_allreduce_workspace_failed" for m in explained.matches)


def test_a_ray_worker_killed_under_its_actor_is_host_memory_first():
    line = (
        "ray.exceptions.ActorDiedError: The actor died because its worker process has died. "
        "Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a "
        "connection error code 2. End of file. There are some potential root causes. (1) The "
        "process is killed by SIGKILL by OOM killer due to high memory usage."
    )
    explained = explain([vllm("INFO", "Loading model weights"), line])
    assert explained.verdict == "failed"
    found = explained.diagnosis
    assert found is not None and found.family == "memory_host"
    assert "dmesg" in found.fix


def test_a_hub_lookup_vllm_retries_or_goes_on_without_fails_nothing_and_its_last_refusal_may():
    # vLLM 0.32.0 repo_utils.py with_retry logs each failed try at ERROR, then retries; the
    # safetensors metadata's last failure is caught (config.py try_get_safetensors_metadata)
    api = "(APIServer pid=103793) "
    retried = api + vllm(
        "ERROR",
        "Error retrieving safetensors: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '/data0/m'. Use `repo_type` argument if needed., retrying 1 of 2",
        "repo_utils.py:47",
    )
    given_up = api + vllm(
        "ERROR",
        "Error retrieving safetensors: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '/data0/m'. Use `repo_type` argument if needed.",
        "repo_utils.py:47",
    )
    explained = explain([*HEALTHY[:READY], retried, given_up, *HEALTHY[READY:]])
    assert explained.verdict == "healthy", explained.why
    # the file list's last failure is raised to its caller: no survived row covers it
    raised = api + vllm("ERROR", "Error retrieving file list: 401 Client Error", "repo_utils.py:47")
    assert not any(
        sig.survived and sig.pattern.search(strip_prefixes(raised)) for sig in SIGNATURES
    )


@pytest.mark.parametrize(
    ("line", "family"),
    [
        # vLLM 0.32.0 renderers/hf.py renders the chat template with jinja2 (pallets/jinja 3.1
        # exceptions.py)
        (
            "jinja2.exceptions.TemplateSyntaxError: expected token 'end of print statement', "
            "got 'name'",
            "tokenizer",
        ),
        ("jinja2.exceptions.UndefinedError: 'messages' is undefined", "tokenizer"),
        # vLLM 0.32.0 renderers/params.py: a request beyond max_model_len
        (
            "vllm.exceptions.VLLMValidationError: This model's maximum context length is 32768 "
            "tokens. However, your request has 40000 input tokens. Please reduce the length of "
            "the input messages.",
            "context_length",
        ),
        # vLLM 0.32.0 model_executor/models/utils.py AutoWeightsLoader._load_module
        (
            "ValueError: There is no module or parameter named 'image_newline' in "
            "LlavaNextForConditionalGeneration. The available parameters belonging to  "
            "(LlavaNextForConditionalGeneration) are: {'lm_head.weight'}",
            "model_arch",
        ),
    ],
)
def test_texts_of_the_chat_template_a_request_and_a_checkpoint_vllm_has_no_place_for(line, family):
    raised = raised_exception(line)
    assert raised is not None and family_of_exception(raised) == family
