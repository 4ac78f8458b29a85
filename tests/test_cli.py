"""The CLI end to end: real catalogs, real files, exit codes and one-line errors."""

import json
import struct

import pytest

from kvplan.cli import main

JSON_KEYS = {
    "kv_bytes_per_token", "kv_bytes_per_token_per_gpu", "weights_bytes_per_gpu",
    "activation_bytes", "non_torch_bytes", "cudagraph_bytes", "available_kv_bytes",
    "block_size", "num_gpu_blocks", "kv_cache_tokens", "max_model_len", "max_concurrency",
    "fits", "model", "gpu", "gpu_memory_bytes", "tensor_parallel_size",
    "pipeline_parallel_size", "data_parallel_size", "kv_cache_dtype", "vllm_version",
}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_size_json_contract_and_catalog_values(capsys):
    code, out, err = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                         "--max-model-len", "32768", "--kv-cache-memory-bytes", "40G", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d.keys() >= JSON_KEYS
    assert d["kv_bytes_per_token"] == 131072
    assert d["available_kv_bytes"] == 40 * 2**30  # vLLM: upper-case G is binary
    assert d["num_gpu_blocks"] == 40 * 2**30 // (2 * 2**20) == 20480
    assert d["kv_cache_tokens"] == 20480 * 16
    assert d["max_concurrency"] == 10.0
    # exact safetensors total + the rotary cache vLLM builds (131,072 positions x 128 x 2 B)
    assert d["rope_cache_bytes"] == 131072 * 128 * 2
    assert d["weights_bytes_per_gpu"] == 16060522496 + d["rope_cache_bytes"]
    assert d["gpu"] == "h100-sxm" and d["vllm_version"] == "0.33"
    assert d["tensor_parallel_size"] == 1 and d["kv_cache_dtype"] == "bfloat16"


@pytest.mark.parametrize("name", ["h100", "NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3",
                                  "h100-sxm"])
def test_gpu_names_resolve(capsys, name):
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", name, "--json")
    assert code == 0 and json.loads(out)["gpu"] == "h100-sxm"


@pytest.mark.parametrize("name,gid", [("Tesla T4", "t4"), ("NVIDIA-L4", "l4"),
                                      ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
                                      ("NVIDIA GeForce RTX 3090", "rtx-3090"),
                                      ("NVIDIA L40S", "l40s"), ("a100-80gb", "a100-sxm4-80gb"),
                                      ("rtx4090", "rtx-4090"),
                                      ("NVIDIA GeForce RTX 5060 Ti", "rtx-5060-ti-16gb"),
                                      ("AMD Instinct MI300X VF", "mi300x-vf"),
                                      ("AMD Instinct MI300X", "mi300x"),
                                      # GKE's cloud.google.com/gke-accelerator values
                                      ("nvidia-tesla-t4", "t4"),
                                      ("nvidia-tesla-a100", "a100-sxm4-40gb"),
                                      ("nvidia-a100-80gb", "a100-sxm4-80gb"),
                                      ("nvidia-h100-80gb", "h100-sxm"),
                                      ("nvidia-h100-mega-80gb", "h100-sxm"),
                                      ("nvidia-h200-141gb", "h200-sxm"), ("nvidia-b200", "b200"),
                                      ("nvidia-rtx-pro-6000", "rtx-pro-6000")])
def test_nvidia_smi_and_gfd_names(capsys, name, gid):
    code, out, err = run(capsys, "size", "qwen2.5-1.5b-instruct", "--gpu", name, "--json",
                         "--max-model-len", "4096")
    assert code == 0, err
    assert json.loads(out)["gpu"] == gid


def test_chunked_prefill_off(capsys):
    # the budget becomes max(max_model_len, 8,192) and a smaller explicit one is refused
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "h100", "--max-model-len", "32768",
                       "--no-enable-chunked-prefill", "--json")
    d = json.loads(out)
    assert code == 0 and d["max_num_batched_tokens"] == 32768
    code, _, err = run(capsys, "size", "qwen3-4b", "--gpu", "h100", "--max-model-len", "32768",
                       "--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192")
    assert code == 2 and "smaller than --max-model-len 32768 with chunked prefill off" in err


def test_given_kv_cache_waterfall(capsys):
    # a given KV size is bounded by the GPU, not by gpu_memory_utilization: the waterfall
    # ends in what is left on the GPU, and says by how much a too-large one overruns it
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "h100",
                       "--kv-cache-memory-bytes", "78G")
    # (Qwen3-4B's 7.50 GiB of tensors hold 54 MiB more in allocator blocks: per layer the
    # 95 MiB gate_up and 47.5 MiB down keep a 96 / 48 MiB segment)
    assert code == 1 and "KV cache as given" in out and "over the GPU by 10.28 GiB" in out
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "h100",
                       "--kv-cache-memory-bytes", "40G")
    assert code == 0 and "27.72 GiB" in out and "headroom" not in out


def test_offline_llm_entrypoint(capsys):
    # the LLM class doubles vllm serve's token budget (8,192 -> 16,384 on an H100)
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "h100", "--entrypoint", "llm",
                       "--json")
    d = json.loads(out)
    assert code == 0 and (d["entrypoint"], d["max_num_batched_tokens"]) == ("llm", 16384)
    code, _, err = run(capsys, "size", "qwen3-4b", "--gpu", "h100", "--entrypoint", "offline")
    assert code == 2 and "--entrypoint 'offline' is not serve, llm or engine" in err


def test_mig_slices(capsys):
    from kvplan.sources.resolve import resolve_gpu

    # nvidia-smi mig -lgip: A100-SXM4-40GB 3g.20gb 19.50 GiB (the smallest figure printed)
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
                       "--json")
    d = json.loads(out)
    assert code == 0 and d["gpu"] == "a100-sxm4-40gb-mig-3g.20gb"
    assert d["gpu_memory_bytes"] == 19968 << 20
    # A30 1g.6gb prints 5.81: 5,952 MiB, the 64 MiB step it is printed from
    assert resolve_gpu("NVIDIA A30 MIG 1g.6gb").memory_bytes == 5952 << 20
    # 3 of 7 slices of the compute, 19.5 / 39.5 GiB of the bandwidth, no NVLink
    full, mig = resolve_gpu("a100-sxm4-40gb"), resolve_gpu("NVIDIA A100-SXM4-40GB MIG 3g.20gb")
    assert mig.tflops["bf16"] == pytest.approx(full.tflops["bf16"] * 3 / 7)
    assert mig.bandwidth_gbps == pytest.approx(full.bandwidth_gbps * 19968 / 40448)
    assert mig.interconnect_gbps == 0
    # --gpu-memory wins over the table; a profile the table lacks needs it
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
                       "--gpu-memory", "19.6GiB", "--json")
    assert code == 0 and json.loads(out)["gpu"] == "a100-sxm4-40gb-mig-3g.20gb (19.6GiB)"
    code, _, err = run(capsys, "size", "qwen3-4b", "--gpu", "NVIDIA-B200-MIG-3g.90gb")
    assert code == 2 and "MIG slice (3g.90gb)" in err and "b200" in err
    assert "Traceback" not in err
    # a CUDA process enumerates one MIG instance: no TP across slices, nor as a fit hint
    code, _, err = run(capsys, "size", "qwen3-4b", "--gpu", "NVIDIA A30 MIG 2g.12gb", "-tp", "2")
    assert code == 2 and "parallelism across MIG slices (2g.12gb)" in err
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu",
                       "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb")
    assert code == 1 and "does not fit on this MIG slice: use a larger profile" in out


def test_estimated_gpu_memory_is_flagged(capsys):
    from kvplan.sources.resolve import resolve_gpu

    # H100 PCIe 1g.10gb on driver 525.125.06: -lgip 9.62, the slice shows 9856MiB
    assert resolve_gpu("NVIDIA H100 PCIe MIG 1g.10gb").memory_bytes == 9856 << 20
    assert resolve_gpu("NVIDIA H100 PCIe MIG 1g.10gb").memory_note == ""
    # H20 borrows the GH200 96 GB table (3g.48gb 46.50): inferred, so size says so
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "NVIDIA-H20-MIG-3g.48gb", "--json")
    d = json.loads(out)
    assert code == 0 and d["gpu_memory_bytes"] == 47616 << 20 and d["gpu_memory_estimated"]
    assert any("3g.48gb slice memory of the h20 is inferred" in n for n in d["notes"])
    # a whole GPU whose total is estimated (B300), and --gpu-memory replacing it
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "b300", "--json")
    assert code == 0 and json.loads(out)["gpu_memory_estimated"]
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "b300", "--gpu-memory", "268GiB",
                       "--json")
    d = json.loads(out)
    assert code == 0 and not d["gpu_memory_estimated"]
    assert not any("estimate" in n and "GPU" in n for n in d["notes"])
    code, out, _ = run(capsys, "size", "qwen3-4b", "--gpu", "h100", "--json")
    assert code == 0 and not json.loads(out)["gpu_memory_estimated"]


def test_unified_memory_gpu_says_the_pool_moves_with_host_use(capsys):
    # GB10: vLLM measures free memory from the host's available RAM (integrated GPU)
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "dgx-spark", "--json")
    assert code == 0
    assert any(n.startswith("unified memory: vLLM reads free memory as the host's available")
               for n in json.loads(out)["notes"])
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100", "--json")
    assert not any(n.startswith("unified memory") for n in json.loads(out)["notes"])


def test_gpu_memory_override(capsys):
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu-memory", "24GiB",
                       "--max-model-len", "8192", "--json")
    d = json.loads(out)
    assert code == 0 and d["gpu_memory_bytes"] == 24 * 2**30
    # a bare 24 is 24 bytes: a missing unit is bad input (exit 2), not "does not fit" (exit 1)
    code, out, err = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu-memory", "24")
    assert code == 2 and "--gpu-memory 24 is 24 bytes, less than any GPU" in err
    assert "give a unit, e.g. 24GiB" in err


def test_custom_gpu_says_which_architecture_it_models(capsys):
    # review 23a #6: --gpu-memory alone is an NVIDIA compute capability 9.0 GPU (the Gpu
    # default): gpt-oss-20b gets Hopper's OpenAI Triton MXFP4 kernel and 8 sequences of 32k,
    # where a 24 GiB Ada card (RTX 4090, 8.9) runs the modular kernels and holds 7
    code, out, _ = run(capsys, "size", "gpt-oss-20b", "--gpu-memory", "24GiB",
                       "--max-model-len", "32k", "--json")
    d = json.loads(out)
    assert code == 0 and d["gpu"] == "custom-24GiB" and d["gpu_catalog_id"] is None
    assert (d["gpu_vendor"], d["gpu_compute_capability"]) == ("nvidia", "9.0")
    assert d["gpu_compute_capability_assumed"] is True
    assert (d["moe_kernel"], d["concurrency_at"]["32000"]) == ("oai_triton", 8)
    assert ("custom GPU: modelled as NVIDIA compute capability 9.0 (Hopper), which picks the "
            "kernels, FP8 support and block sizes; pass --gpu NAME (with --gpu-memory SIZE) for "
            "another architecture") in d["notes"]
    code, out, _ = run(capsys, "size", "gpt-oss-20b", "--gpu", "rtx-4090", "--gpu-memory",
                       "24GiB", "--max-model-len", "32k", "--json")
    d = json.loads(out)
    assert (d["gpu_compute_capability"], d["gpu_compute_capability_assumed"]) == ("8.9", False)
    assert (d["moe_kernel"], d["concurrency_at"]["32000"]) == ("modular", 7)
    assert not any("custom GPU" in n for n in d["notes"])


@pytest.mark.parametrize("name, gpu, catalog_id", [
    # review 23a #15: `gpu` names the variant sized; gpu_catalog_id the gpus.yaml entry
    (["--gpu", "h100"], "h100-sxm", "h100-sxm"),
    (["--gpu", "h100", "--gpu-memory", "70GiB"], "h100-sxm (70GiB)", "h100-sxm"),
    (["--gpu", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"], "h100-sxm-mig-3g.40gb", "h100-sxm"),
    # review 23a #11: GPU feature discovery's time-slicing label (renameByDefault)
    (["--gpu", "NVIDIA-H100-80GB-HBM3-SHARED"], "h100-sxm", "h100-sxm"),
    (["--gpu", "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb-SHARED"], "a100-sxm4-40gb-mig-3g.20gb",
     "a100-sxm4-40gb"),
])
def test_gpu_key_and_catalog_id(capsys, name, gpu, catalog_id):
    code, out, err = run(capsys, "size", "qwen3-4b", *name, "--max-model-len", "8192", "--json")
    d = json.loads(out)
    assert code == 0, err
    assert (d["gpu"], d["gpu_catalog_id"], d["gpu_compute_capability_assumed"]) == (
        gpu, catalog_id, False)
    shared = [n for n in d["notes"] if "time-sliced" in n]
    assert shared == ([f"{name[1]} is a time-sliced GPU (GPU feature discovery's -SHARED "
                       "label): the pods that share it share its memory, and this sizes one "
                       "vLLM with all of it"] if name[1].endswith("SHARED") else [])


def test_unknown_model_suggests(capsys):
    code, out, err = run(capsys, "size", "llama-3.1-8b-instruc", "--gpu", "h100")
    assert code == 2 and out == ""
    assert err.startswith("kvplan: error: unknown model 'llama-3.1-8b-instruc'")
    assert "did you mean" in err and "Traceback" not in err
    assert err.count("\n") == 1


def test_misleading_model_errors_name_the_cause(capsys, tmp_path):
    # review 23a #12: --revision skips the catalog, so it needs a Hub repo id
    code, _, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "--revision", "main")
    assert code == 2 and err == (
        "kvplan: error: --revision needs a Hub repo id; 'llama-3.1-8b' is the catalog alias of "
        "meta-llama/Llama-3.1-8B (pass meta-llama/Llama-3.1-8B --revision main)\n")
    code, _, err = run(capsys, "size", "", "--gpu", "h100")
    assert code == 2 and err.startswith("kvplan: error: MODEL is empty (give a catalog id")
    # a user entry whose alias takes a built-in name, with an incomplete config: the error
    # names the entry, its file and the name it took
    f = tmp_path / "dupalias.yaml"
    f.write_text("schema_version: 1\nmodels:\n  acme/c:\n    aliases: [llama-3.1-8b]\n"
                 "    config: {model_type: llama}\n")
    code, _, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "--catalog", str(f))
    assert code == 2 and err.startswith(
        f"kvplan: error: catalog model 'acme/c' in {f}, whose name 'llama-3.1-8b' hides "
        "'meta-llama/Llama-3.1-8B': config of model_type 'llama' lacks hidden_size")
    code, _, err = run(capsys, "size", "acme/c", "--gpu", "h100", "--catalog", str(f))
    assert code == 2 and err.startswith(f"kvplan: error: catalog model 'acme/c' in {f}: config")


def test_unknown_gpu_suggests(capsys):
    code, _, err = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h1000")
    assert code == 2 and "unknown GPU 'h1000'" in err and "h100" in err


def test_does_not_fit_exits_1_and_names_largest_len(capsys):
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "l4",
                       "--max-model-len", "131072", "--json")
    d = json.loads(out)
    assert code == 1 and d["fits"] is False
    assert 0 < d["largest_max_model_len"] < 131072
    assert str(d["largest_max_model_len"]) in d["failure"]


def test_weights_do_not_fit_suggests_tp(capsys):
    code, out, _ = run(capsys, "size", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100",
                       "--max-model-len", "4096")
    assert code == 1
    assert "fits with --tensor-parallel-size 2" in out.replace("\n", " ")


def test_weights_hint_offers_a_smaller_tp_with_a_shorter_context(capsys):
    # Llama-3.3-70B on L40S at 131,072 tokens: TP4 holds the weights (32.9 GiB per GPU) but
    # one full request needs 10 GiB of KV where 5.7 GiB is left, so the hint names TP8 and,
    # as the alternative, TP4 at the largest max_model_len TP4 itself reports
    code, out, _ = run(capsys, "size", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "l40s")
    line = out.replace("\n", " ")
    code4, out4, _ = run(capsys, "size", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "l40s",
                         "-tp", "4", "--json")
    largest = json.loads(out4)["largest_max_model_len"]
    assert code == 1 and code4 == 1 and 4096 <= largest < 131072
    assert ("fits with --tensor-parallel-size 8 (16.5 GiB of weights and 22.1 GiB of KV per "
            f"GPU); or with --tensor-parallel-size 4 --max-model-len {largest} (32.9 GiB") in line


def test_hint_offers_the_asked_tp_with_a_shorter_context_when_the_profile_fails(capsys):
    # review 23a #5: Qwen2.5-VL-7B on one L4 at its 128,000 default: the profile's video item
    # (114,688 tokens, 14.85 GiB) leaves no KV cache; it shrinks with max_model_len, so TP1
    # starts at 31,520 (a 16,384-token video, whose 1.68 GiB of KV then holds one request of
    # that length; the 125 MiB MRoPE cache takes the rest), found by bisection through the
    # same sizing
    code, out, _ = run(capsys, "size", "qwen2.5-vl-7b", "--gpu", "l4", "--json")
    d = json.loads(out)
    assert code == 1 and d["failure"].startswith("no memory left for the KV cache")
    assert ("fits with --tensor-parallel-size 4 (4.0 GiB of weights and 6.0 GiB of KV per GPU); "
            "or with --max-model-len 31520 (1.7 GiB of KV per GPU)") in d["notes"]
    for n, fits in ((31520, 0), (31521, 1)):
        code, _, _ = run(capsys, "size", "qwen2.5-vl-7b", "--gpu", "l4", "--max-model-len",
                         str(n))
        assert code == fits
    # where the peak does not move with the length, the failure's own largest length is it,
    # and the hint does not repeat it
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "l4",
                       "--max-model-len", "131072", "--json")
    d = json.loads(out)
    assert code == 1 and d["failure"].endswith("the largest max_model_len that fits is 29104")
    assert d["notes"][-1] == ("fits with --tensor-parallel-size 2 (7.5 GiB of weights and 10.9 "
                              "GiB of KV per GPU)")


def test_bad_tp_exit_2(capsys):
    code, _, err = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100", "-tp", "3")
    assert code == 2 and "not divisible by 3" in err


def test_fit_hint_offers_only_tps_vllm_builds(capsys):
    """review 24a F1: phi-4 (40 heads, 10 KV heads) was offered TP 4, which vLLM cannot
    build; 5 is the first TP above 1 that splits both."""
    code, out, _ = run(capsys, "size", "microsoft/phi-4", "--gpu", "rtx-4080", "--json")
    d = json.loads(out)
    assert code == 1 and d["notes"][-1].startswith("fits with --tensor-parallel-size 5 (")
    code, _, err = run(capsys, "size", "microsoft/phi-4", "--gpu", "rtx-4080", "-tp", "4")
    assert code == 2 and err == ("kvplan: error: vLLM rejects --tensor-parallel-size 4: its 10 "
                                 "KV heads neither split nor replicate evenly over 4 GPUs ('10 "
                                 "is not divisible by 4') (use one of 1, 2, 5, 10)\n")


def test_fit_hint_offers_the_least_utilization_that_starts(capsys):
    """review 24a F6: at 0.2 the hint offered only more GPUs. 0.44 x 79.19 GiB leaves 16.4 GiB
    of KV, one 131,072-token request (16 GiB); 0.43 leaves 15.6."""
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                       "--gpu-memory-utilization", "0.2", "--json")
    assert code == 1 and json.loads(out)["notes"][-1].startswith(
        "fits with --gpu-memory-utilization 0.44 (16.4 GiB of KV per GPU); or with "
        "--tensor-parallel-size 4 (")
    code, _, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                     "--gpu-memory-utilization", "0.44")
    assert code == 0
    code, _, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                     "--gpu-memory-utilization", "0.43")
    assert code == 1


def test_plain_and_binary_integers_stay_exact(capsys):
    """review 24b F6: `human_readable_int` reads int(value) and int(number) x 2^k exactly; a
    float round trip echoed 99999999999999999999999 as 99999999999999991611392."""
    from kvplan.units import parse_vllm_int

    assert parse_vllm_int("99999999999999999999999", what="--max-model-len") == 10**23 - 1
    assert parse_vllm_int("9007199254740993K", what="--max-model-len") == 9007199254740993 * 1024
    assert parse_vllm_int("25.6k", what="--max-model-len") == 25600  # int(float(25.6) x 1000)
    from kvplan.units import parse_bytes  # --gpu-memory takes Kubernetes' Gi too (F9)

    assert parse_bytes("24Gi") == parse_bytes("24GiB") == 24 << 30


def test_max_model_len_suffixes_follow_vllm(capsys):
    _, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                    "--max-model-len", "32k", "--json")
    assert json.loads(out)["max_model_len"] == 32000
    code, _, err = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                       "--max-model-len", "lots")
    assert code == 2 and "cannot read --max-model-len" in err


@pytest.mark.parametrize("flag, value, version, says", [
    # 0.6.0-0.8.3 `add_argument('--max-model-len', type=int)`; human_readable_int from 0.8.4
    ("--max-model-len", "32k", "0.6.0", "vLLM 0.6.0 reads --max-model-len as a plain integer "
     "('32k': 'invalid int value') (write 32000; vLLM reads suffixes there from 0.8.4)"),
    ("--max-model-len", "32K", "0.8.3", "(write 32768; vLLM reads suffixes there from 0.8.4)"),
    # `get_kwargs`' large-integer set gains max_num_batched_tokens in 0.9.1
    ("--max-num-batched-tokens", "8k", "0.9.0", "(write 8000; vLLM reads suffixes there from "
     "0.9.1)"),
    # `human_readable_int`: "Decimals are not allowed with binary suffixes like G. Did you
    # mean to use 20.5g instead?"
    ("--kv-cache-memory-bytes", "20.5G", "0.33", "cannot read --kv-cache-memory-bytes '20.5G': "
     "decimals are not allowed with binary suffixes like G (did you mean 20.5g?)"),
    ("--kv-cache-memory-bytes", "20GiB", "0.33", "(use a byte count such as 21474836480, 20G "
     "(= 20 GiB) or 20g (= 20,000,000,000))"),
    ("--max-model-len", "32.5K", "0.33", "(did you mean 32.5k?)"),
])
def test_integer_flags_parse_as_the_release_parses_them(capsys, flag, value, version, says):
    code, out, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", flag, value,
                         "--vllm-version", version)
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err


def test_integer_flags_take_suffixes_from_their_first_release(capsys):
    # a minor alone stands for its newest patch, as check's flag records (0.8 = 0.8.5)
    for flag, value, version, want in (("--max-model-len", "32k", "0.8.4", 32000),
                                       ("--max-model-len", "32k", "0.8", 32000),
                                       ("--max-model-len", "32000", "0.6.0", 32000),
                                       ("--max-num-batched-tokens", "8K", "0.9.1", 8192)):
        code, out, _ = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", flag, value,
                           "--vllm-version", version, "--json")
        assert code == 0 and json.loads(out)[flag[2:].replace("-", "_")] == want


def test_kv_cache_memory_bytes_before_its_release_is_noted(capsys):
    # the flag arrives in 0.10.2 (no kv_cache_memory in 0.6.0-0.10.1 arg_utils.py): sized as
    # given (20 GiB / 2 MiB blocks = 10,240), with a note that `vllm serve` refuses it
    code, out, _ = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "--vllm-version", "0.8.5",
                       "--kv-cache-memory-bytes", "20G", "--max-model-len", "8192", "--json")
    d = json.loads(out)
    assert code == 0 and d["num_gpu_blocks"] == 10240
    assert ("vLLM 0.8.5 has no --kv-cache-memory-bytes (it arrives in 0.10.2), so its `vllm "
            "serve` refuses the flag: sized as a start whose profile left that much for the KV "
            "cache") in d["notes"]
    _, out, _ = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "--vllm-version", "0.10.2",
                    "--kv-cache-memory-bytes", "20G", "--max-model-len", "8192", "--json")
    assert not any("--kv-cache-memory-bytes" in n for n in json.loads(out)["notes"])


def test_max_model_len_over_limit(capsys):
    code, _, err = run(capsys, "size", "qwen2.5-7b-instruct", "--gpu", "h100",
                       "--max-model-len", "65536")
    assert code == 2 and "exceeds the model's maximum of 32768" in err


def test_bad_kv_dtype_for_version(capsys):
    code, _, err = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                       "--kv-cache-dtype", "bfloat16", "--vllm-version", "0.10.2")
    assert code == 2 and "not accepted by this vLLM version" in err


def test_kv_dtypes_are_each_releases_own():
    """`VllmVersion.kv_cache_dtypes` is what every release's parser takes: its CacheDType
    (the --kv-cache-dtype choices / known values vllm_flags.json records, with the patches'
    own lists from vllm_patch_flags.json: fp8_ds_mla from 0.11.1, not 0.11.0)."""
    from kvplan.core.versions import VllmVersion
    from kvplan.engines.vllm_registry import registry, releases

    for r in releases():
        known = set(registry(r).lookup("--kv-cache-dtype").choices) - {"None"}
        assert set(VllmVersion.of(r).kv_cache_dtypes) == known, r
    assert "fp8_ds_mla" not in VllmVersion.of("0.11.0").kv_cache_dtypes
    assert "fp8_ds_mla" in VllmVersion.of("0.11.1").kv_cache_dtypes
    assert "float16" in VllmVersion.of("0.18.0").kv_cache_dtypes
    assert "fp8_inc" not in VllmVersion.of("0.9.2").kv_cache_dtypes


def test_kv_dtypes_the_release_accepts_are_sized(capsys):
    # DeepSeek-V3.2's usual fp8_ds_mla (0.11.1+) and float16 (0.18+) were refused before 0.20
    code, out, err = run(capsys, "recommend", "deepseek-ai/DeepSeek-V3.2", "--gpu", "h200",
                         "-tp", "8", "--kv-cache-dtype", "auto|fp8_ds_mla", "--workload", "chat",
                         "--rate", "5", "--vllm-version", "0.19", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["kv_cache_dtype"] == "fp8_ds_mla" and "--kv-cache-dtype fp8_ds_mla" in d["command"]
    code, out, err = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                         "--kv-cache-dtype", "float16", "--vllm-version", "0.19", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["kv_cache_dtype"] == "float16" and d["kv_bytes_per_token"] == 131072
    code, _, err = run(capsys, "recommend", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                       "--kv-cache-dtype", "float16", "--vllm-version", "0.17", "--rate", "5")
    assert code == 2 and "--kv-cache-dtype float16 is not accepted by vLLM 0.17" in err
    code, _, err = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                       "--kv-cache-dtype", "fp8_inc", "--vllm-version", "0.9")
    assert code == 2 and "not accepted by this vLLM version" in err  # fp8_inc from 0.10
    # 0.33 refuses a 16-bit cache unlike the model's (`_reject_mismatched_float_kv_cache`)
    for dtype, kv, ok in (("auto", "float16", "auto or bfloat16"),
                          ("float16", "bfloat16", "auto or float16"),
                          ("float32", "bfloat16", "auto)")):
        code, _, err = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                           "--dtype", dtype, "--kv-cache-dtype", kv)
        assert code == 2 and f"refuses --kv-cache-dtype {kv}" in err and ok in err, err
    code, _, _ = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                     "--kv-cache-dtype", "bfloat16")
    assert code == 0


def test_a_kv_dtype_vllm_accepts_but_kvplan_cannot_size_is_said_so(capsys, monkeypatch):
    from kvplan.core.versions import VllmVersion

    real = VllmVersion.kv_cache_dtypes.fget
    monkeypatch.setattr(VllmVersion, "kv_cache_dtypes", property(
        lambda self: tuple(k for k in real(self) if k != "float16")))
    code, _, err = run(capsys, "recommend", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                       "--kv-cache-dtype", "auto|float16", "--vllm-version", "0.19",
                       "--rate", "5")
    assert code == 2 and "kvplan does not size --kv-cache-dtype float16 (vLLM 0.19 accepts " \
        "it)" in err


def test_unknown_flag_is_one_line(capsys):
    code, _, err = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100", "--bogus")
    assert code == 2 and "Traceback" not in err


def _write_safetensors(path, tensors):
    header = {}
    off = 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
        off += nbytes
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"\0" * off)
    return off


def test_local_directory_reads_safetensors_headers(tmp_path, capsys):
    from configs import LLAMA31_8B

    (tmp_path / "config.json").write_text(json.dumps(LLAMA31_8B))
    a = _write_safetensors(tmp_path / "model-00001-of-00002.safetensors",
                           {"a": ("BF16", [1024, 512], 1024 * 512 * 2)})
    b = _write_safetensors(tmp_path / "model-00002-of-00002.safetensors",
                           {"b": ("BF16", [512], 1024), "c": ("F32", [4], 16)})
    code, out, err = run(capsys, "size", str(tmp_path), "--gpu", "h100", "--json",
                         "--max-model-len", "8192")
    assert code == 0, err
    d = json.loads(out)
    assert d["weights_total_bytes"] == a + b and d["weights_estimated"] is False


def test_truncated_safetensors_header(tmp_path, capsys):
    from configs import LLAMA31_8B

    (tmp_path / "config.json").write_text(json.dumps(LLAMA31_8B))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 10**6) + b"{}")
    code, _, err = run(capsys, "size", str(tmp_path), "--gpu", "h100")
    assert code == 2 and "larger than the file" in err


def test_malformed_config(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{not json")
    code, _, err = run(capsys, "size", str(tmp_path), "--gpu", "h100")
    assert code == 2 and "is not valid JSON" in err


def test_llama4_vision_widths_default_as_transformers_and_null_is_bad_input(tmp_path, capsys):
    """fuzz seed 2502: a null projector_input_dim was an internal TypeError (exit 3)."""
    from kvplan.sources.resolve import resolve_model

    cfg = json.loads(json.dumps(resolve_model("meta-llama/Llama-4-Scout-17B-16E-Instruct").config))
    vc = cfg["vision_config"]
    # transformers' `Llama4VisionConfig` defaults 4096 and 4096, which Scout keeps
    assert (vc["projector_input_dim"], vc["projector_output_dim"]) == (4096, 4096)
    vc["projector_input_dim"] = None
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, _, err = run(capsys, "size", str(tmp_path), "--gpu", "h100", "-tp", "4")
    assert code == 2 and err == ("kvplan: error: config field 'vision_config.projector_input_dim'"
                                 " is null: vLLM cannot build the vision projector (give its "
                                 "width or drop the key)\n")
    for key in ("projector_input_dim", "projector_output_dim"):
        vc.pop(key)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    absent = run(capsys, "size", str(tmp_path), "--gpu", "h100", "-tp", "4", "--json")
    vc.update(projector_input_dim=4096, projector_output_dim=4096)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    given = run(capsys, "size", str(tmp_path), "--gpu", "h100", "-tp", "4", "--json")
    assert absent == given


def test_incomplete_config_names_field(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama",
                                                      "num_attention_heads": 8}))
    code, _, err = run(capsys, "size", str(tmp_path / "config.json"), "--gpu", "h100")
    assert code == 2 and "hidden_size" in err


@pytest.mark.parametrize("where,key,value,says", [
    ("top", "model_type", 3, "'model_type' must be a string"),
    ("top", "architectures", True, "'architectures' must be a list of strings"),
    ("text", "num_key_value_heads", {}, "'num_key_value_heads' must be a non-negative integer"),
    ("text", "mlp_only_layers", 10**12, "'mlp_only_layers' must be a list of integers"),
    ("text", "model_type", [], "'model_type' must be a string"),
    ("text", "rope_scaling", "yarn", "'rope_scaling' must be an object"),
    ("text", "head_dim", 1.5, "'head_dim' must be a non-negative integer"),
    # review 23a #10: a whole float is no count either (vLLM's shapes become floats)
    ("text", "num_attention_heads", 32.0,
     "config field 'num_attention_heads' must be a non-negative integer, got 32.0"),
    # 0 KV heads: `LlamaAttention`'s tp_size % total_num_kv_heads; more KV heads than query
    # heads or not dividing them: `Attention.__init__` "num_heads ... is not divisible by"
    ("text", "num_key_value_heads", 0,
     "config gives 0 KV heads (num_key_value_heads, layer 0): vLLM's attention layer divides "
     "by the count (ZeroDivisionError) (give the model's KV head count, 1 or more)"),
    ("text", "num_key_value_heads", 64,
     "config gives 64 KV heads (num_key_value_heads, layer 0) for 32 attention heads: vLLM "
     "refuses them ('num_heads (32) is not divisible by num_kv_heads (64)')"),
    ("text", "num_key_value_heads", 12, "'num_heads (32) is not divisible by num_kv_heads (12)'"),
    ("text", "num_hidden_layers", 10**12, "not a plausible layer count"),
    # IndexCache's fields (fuzz seed 561)
    ("text", "index_skip_topk_offset", [1], "'index_skip_topk_offset' must be an integer"),
    ("text", "index_topk_freq", "4", "'index_topk_freq' must be a non-negative integer"),
    ("text", "rotary_dim", "nan", "'rotary_dim' must be a non-negative integer"),  # seed 2552
    ("top", "vision_config", {"default_output_length": {"a": 1}},
     "'vision_config.default_output_length' must be a non-negative integer"),  # seed 571
    # compressed-tensors scheme groups (fuzz seed 401)
    ("text", "quantization_config", {"quant_method": "compressed-tensors",
                                     "config_groups": {"a": 1}},
     "'quantization_config.config_groups.a' must be an object"),
    ("text", "quantization_config", {"quant_method": "compressed-tensors",
                                     "config_groups": {"a": {"weights": {"num_bits": "4"}}}},
     "'quantization_config.config_groups.a.weights.num_bits' must be a non-negative"),
    # session 28's CLI fuzz: [0, 0] divided by zero; vLLM's Fp8Config takes two dimensions
    *[("text", "quantization_config", {"quant_method": "fp8", "weight_block_size": b},
       f"'quantization_config.weight_block_size' must be two positive integers ([rows, "
       f"columns] of a weight block), got {b}") for b in ([0, 0], [0, 128], [128], [])],
])
def test_config_field_of_the_wrong_type_is_named(tmp_path, capsys, where, key, value, says):
    """Mutations found by fuzzing real configs: each was an internal error (or, for the layer
    count, an out-of-memory kill) before the field types were checked."""
    cfg = {"model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
           "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 4096,
                           "num_attention_heads": 32, "num_key_value_heads": 8,
                           "num_hidden_layers": 36, "head_dim": 128, "vocab_size": 151936,
                           "intermediate_size": 12288}}
    (cfg if where == "top" else cfg["text_config"])[key] = value
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, _, err = run(capsys, "size", str(tmp_path), "--gpu", "h100")
    if where == "text":  # the wrapper's field is named by its path
        says = says.replace(f"'{key}", f"'text_config.{key}")
    assert code == 2 and says in err and err.count("\n") == 1
    # the file is named (a user catalog's entry is, too)
    assert err.startswith(f"kvplan: error: {tmp_path / 'config.json'}: ")


@pytest.mark.parametrize("change,says", [
    # vLLM refuses each at start (session 28's CLI fuzz found them sized with exit 0)
    ({"quantization_config": {"quant_method": "zzz"}},
     "vLLM 0.33 does not know the checkpoint's quantization method 'zzz' "
     "(quantization_config.quant_method; 'Unknown quantization method')"),
    ({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 0}},
     "config field 'quantization_config.group_size' must be positive, or -1 for one group "
     "per channel, got 0"),
    ({"num_experts": 8, "num_experts_per_tok": 16, "moe_intermediate_size": 768},
     "config routes each token to 16 experts of 8 (the top-k (num_experts_per_tok) must not "
     "exceed the expert count)"),
    ({"text_config": 5}, "config field 'text_config' must be an object, got 5"),
])
def test_configs_vllm_refuses_are_refused(tmp_path, capsys, change, says):
    cfg = {"model_type": "qwen3_moe" if "num_experts" in change else "qwen3",
           "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 36,
           "head_dim": 128, "vocab_size": 151936, "intermediate_size": 12288,
           "torch_dtype": "bfloat16", **change}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, _, err = run(capsys, "size", str(tmp_path), "--gpu", "h100")
    assert code == 2 and says in err and err.count("\n") == 1


def test_a_field_from_hf_overrides_is_named_so(capsys):
    code, _, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "--hf-overrides",
                       '{"num_hidden_layers": -1}')
    assert code == 2 and err == ("kvplan: error: meta-llama/Llama-3.1-8B with "
                                 "--hf-overrides: config field "
                                 "'num_hidden_layers' must be a non-negative integer, got -1\n")


def test_head_dim_0_reads_as_unset(tmp_path, capsys):
    """Review 28: transformers saves DeepseekVLV2TextConfig's head_dim as 0, which vLLM 0.33's
    `get_head_size` and `head_dim or hidden // heads` read as unset: hidden // heads."""
    cfg = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 36,
           "vocab_size": 151936, "intermediate_size": 12288, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "head_dim": 0}))
    code, out, err = run(capsys, "size", str(tmp_path), "--gpu", "h100", "--json")
    assert code == 0, err
    assert json.loads(out)["kv_bytes_per_token"] == 36 * 2 * 8 * 128 * 2


def test_a_path_that_is_no_file_or_directory(capsys):
    code, _, err = run(capsys, "size", "/dev/null", "--gpu", "h100")
    assert code == 2 and err == ("kvplan: error: /dev/null is neither a config.json nor a model "
                                 "directory (point at a model directory or its config.json)\n")


def test_unclassifiable_architecture(tmp_path, capsys):
    cfg = {"model_type": "step5", "architectures": ["Step5ForCausalLM"],
           "hidden_size": 4096, "num_attention_heads": 64, "num_hidden_layers": 92}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, _, err = run(capsys, "size", str(tmp_path), "--gpu", "h100")
    assert code == 2 and "Step5ForCausalLM" in err and "does not model" in err


def test_kimi_linear_without_its_layer_lists_names_the_field(tmp_path, capsys):
    cfg = {"model_type": "kimi_linear", "architectures": ["KimiLinearForCausalLM"],
           "hidden_size": 7168, "num_attention_heads": 96, "num_hidden_layers": 93,
           "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, _, err = run(capsys, "size", str(tmp_path), "--gpu", "h100")
    assert code == 2 and "linear_attn_config" in err and "Traceback" not in err


def test_user_catalog_overrides_builtin(tmp_path, capsys):
    cat = tmp_path / "site.yaml"
    cat.write_text("gpus:\n  h100-sxm:\n    name: Site H100\n    aliases: [h100]\n"
                   "    memory_bytes: 42949672960\n    compute_capability: '9.0'\n")
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                       "--catalog", str(cat), "--json", "--max-model-len", "8192")
    assert code == 0 and json.loads(out)["gpu_memory_bytes"] == 40 * 2**30


def test_malformed_user_catalog(tmp_path, capsys):
    cat = tmp_path / "bad.yaml"
    cat.write_text("gpus: [unclosed\n")
    code, _, err = run(capsys, "gpus", "--catalog", str(cat))
    assert code == 2 and "not valid YAML" in err


def test_human_output_has_waterfall(capsys):
    code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", "h100",
                       "--max-model-len", "8192")
    assert code == 0
    for word in ("weights", "activation peak", "KV cache pool", "headroom", "GPU KV cache size",
                 "max concurrency"):
        assert word in out


def test_models_and_gpus_listings(capsys):
    code, out, _ = run(capsys, "models", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) >= 60
    code, out, _ = run(capsys, "gpus", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) >= 25
    # MIG profiles listed with the bytes a slice is sized with (A30 1g.6gb prints 5.81 GiB)
    a30 = next(r for r in rows if r["id"] == "a30")
    assert a30["mig_profiles"]["1g.6gb"] == 5952 << 20
    # the link facts the parallel terms take: bridged pairs, NVSwitch nodes, NVL72 trays
    link = {r["id"]: (r["nvlink_domain"], r["gpus_per_node"]) for r in rows}
    assert link["rtx-3090"] == (2, 8) and link["h100-sxm"] == (8, 8)
    assert link["gb200"] == (72, 4) and link["l40s"] == (1, 8)


def test_cudagraph_estimate_by_release_and_vendor(capsys):
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults on from 0.20; the worker profiles
    # graphs on CUDA only until 0.25 and on ROCm from 0.26 (`is_cuda_alike`)
    def graphs(gpu, version):
        code, out, _ = run(capsys, "size", "gemma-3-4b-it", "--gpu", gpu, "--json",
                           "--vllm-version", version, "--max-model-len", "8192")
        assert code == 0
        d = json.loads(out)
        return d["cudagraph_bytes"], d["cudagraph_graphs"]

    assert graphs("h100", "0.19") == (0, 0)
    # 34 layers x (51 PIECEWISE sizes 1..512 + 51 FULL ones <= max_num_seqs 1,024) graphs
    cuda = (130 + 0.133 * 34 * 102) * 2**20
    assert graphs("h100", "0.23") == (int(cuda), 102)
    # HIP graphs: 6.8 x the CUDA estimate (MI300X captures and printed estimates)
    assert graphs("mi300x", "0.29") == (int(cuda * 6.8), 102)
    assert graphs("mi300x", "0.25") == (0, 0)
    # 0.25-0.28 run this dense model on model runner V2, whose `profile_cudagraph_memory`
    # returns 0 until 0.29
    assert graphs("mi300x", "0.26") == graphs("h100", "0.28") == (0, 0)


def test_decode_context_parallel_flag(capsys):
    code, out, _ = run(capsys, "size", "kimi-k2-thinking", "--gpu", "h200", "-tp", "8",
                       "-dcp", "8", "--vllm-version", "0.11", "--kv-cache-memory-bytes", "40G",
                       "--json")
    d = json.loads(out)
    assert code == 0 and d["decode_context_parallel_size"] == 8
    # 40 GiB / (64 tokens x 70,272 B) = 9,549 blocks; 0.11 logs blocks x 64 x dcp tokens
    assert d["num_gpu_blocks"] == 40 * 2**30 // (64 * 70272) == 9549
    assert d["kv_cache_tokens"] == 9549 * 64 * 8
    code, out, _ = run(capsys, "size", "kimi-k2-thinking", "--gpu", "h200", "-tp", "8",
                       "-dcp", "8", "--vllm-version", "0.11", "--kv-cache-memory-bytes", "40G")
    assert "a block covers 512 tokens of a request" in out  # 64-token MLA blocks x 8
    code, _, err = run(capsys, "size", "kimi-k2-thinking", "--gpu", "h200", "-tp", "8",
                       "-dcp", "3")
    assert code == 2 and "not divisible" in err


def test_fp8_block_checkpoint_rejects_tp_that_splits_a_block(capsys):
    # Qwen3-30B-A3B-FP8: 128x128 blocks, expert intermediate 768 -> 96 per GPU at TP8 (vLLM:
    # "The output_size of gate's and up's weight = 96 is not divisible by ... block_n = 128")
    code, _, err = run(capsys, "size", "Qwen/Qwen3-30B-A3B-FP8", "--gpu", "h100", "-tp", "8",
                       "--vllm-version", "0.28")
    assert code == 2
    assert "the experts' intermediate per GPU (96) is not a multiple of its 128x128" in err
    assert "use --tensor-parallel-size 2, or add --enable-expert-parallel" in err
    for flags in (["-tp", "2"], ["-tp", "8", "--enable-expert-parallel"],
                  ["-tp", "8"]):  # 0.29+: gcd(128, 128, 96, 2,048) = 32-wide blocks, Triton
        code, _, err = run(capsys, "size", "Qwen/Qwen3-30B-A3B-FP8", "--gpu", "h100", *flags)
        assert code == 0, err
    # at TP16 the gcd is 16, below the 32 vLLM refines to: refused
    code, _, err = run(capsys, "size", "Qwen/Qwen3-30B-A3B-FP8", "--gpu", "h100", "-tp", "16")
    assert code == 2 and "(48) is not a multiple" in err


def test_cpu_offload_moves_weights_to_host_memory(capsys):
    base = ["size", "llama-3.1-8b-instruct", "--gpu", "rtx4090", "--max-model-len", "32768",
            "--json"]
    code, out, _ = run(capsys, *base)
    full = json.loads(out)
    code, out, _ = run(capsys, *base, "--cpu-offload-gb", "4")
    off = json.loads(out)
    assert code == 0
    # vLLM offloads decoder parameters until 4 GiB sit in host memory (`UVAOffloader`)
    assert full["weights_bytes_per_gpu"] - off["weights_bytes_per_gpu"] == 4 * 2**30
    assert off["available_kv_bytes"] - full["available_kv_bytes"] == 4 * 2**30
    assert any("cross PCIe on every forward pass" in n for n in off["notes"])
    code, _, err = run(capsys, *base, "--cpu-offload-gb", "-1")
    assert code == 2 and "--cpu-offload-gb must be a number >= 0" in err
    # only decoder layers are wrapped: past their bytes the embedding, the untied LM head and
    # the rotary cache stay (Qwen3-8B: 2 x 151,936 x 4,096 x 2 B + 40,960 x 128 x 2 B)
    code, out, _ = run(capsys, "size", "qwen3-8b", "--gpu", "l4", "--max-model-len", "32768",
                       "--cpu-offload-gb", "64", "--json")
    assert code == 0 and json.loads(out)["weights_bytes_per_gpu"] == \
        2 * 151936 * 4096 * 2 + 40960 * 128 * 2


def test_performance_mode_throughput_doubles_the_batch_defaults(capsys):
    base = ["size", "llama-3.1-8b-instruct", "--gpu", "h100", "--max-model-len", "8192", "--json"]
    code, out, _ = run(capsys, *base)
    d = json.loads(out)
    code, out, _ = run(capsys, *base, "--performance-mode", "throughput")
    t = json.loads(out)
    assert (d["max_num_seqs"], d["max_num_batched_tokens"]) == (1024, 8192)
    assert (t["max_num_seqs"], t["max_num_batched_tokens"]) == (2048, 16384)
    # the sampler term doubles with the dummy requests: 1,024 more x 128,256 x 4 B x 3.5 (the
    # FlashInfer warm-up sampler), and so does V2's penalty / grammar state: 1,024 more x
    # (128,256 + 2 x 4,008) x 4 B; the dummy run's hidden states, held while the sampler
    # runs, double with the token budget: 8,192 more x 4,096 x 2 B
    assert t["activation_bytes"] - d["activation_bytes"] == int(
        2048 * 128256 * 4 * 3.5 + 514 * 2**20) - int(1024 * 128256 * 4 * 3.5 + 514 * 2**20) \
        + 1024 * (128256 + 2 * 4008) * 4 + 8192 * 4096 * 2
    code, _, err = run(capsys, *base, "--performance-mode", "fast")
    assert code == 2 and "not one of balanced, interactivity, throughput" in err
    code, _, err = run(capsys, *base, "--performance-mode", "throughput", "--vllm-version", "0.14")
    assert code == 2 and "vLLM 0.14 has no --performance-mode" in err


def test_batch_defaults_tier_for_160_gib_gpus(capsys):
    # `get_batch_defaults`: >= 160 GiB devices get a 16,384-token budget from 0.28 (not 0.27)
    def mnbt(gpu, version):
        code, out, _ = run(capsys, "size", "llama-3.1-8b-instruct", "--gpu", gpu, "--json",
                           "--vllm-version", version, "--max-model-len", "8192")
        assert code == 0
        return json.loads(out)["max_num_batched_tokens"]

    assert mnbt("mi300x", "0.27") == 8192 and mnbt("mi300x", "0.28") == 16384
    assert mnbt("b200", "0.29") == 16384 and mnbt("h100", "0.29") == 8192


def test_cudagraph_capture_flags(capsys):
    # vLLM's --max-cudagraph-capture-size / --cudagraph-capture-sizes set the captured grid
    def graphs(*flags):
        code, out, _ = run(capsys, "size", "qwen2.5-1.5b-instruct", "--gpu", "l4", "--json",
                           *flags)
        assert code == 0
        d = json.loads(out)
        return d["cudagraph_graphs"], d["cudagraph_bytes"]

    # L4 defaults: 256 sequences -> 51 sizes up to 512, 35 of them FULL decode sizes <= 256
    assert graphs()[0] == 86
    # up to 16: 1, 2, 4, 8, 16, each PIECEWISE and FULL (<= 256 sequences); 28 layers
    assert graphs("--max-cudagraph-capture-size", "16") == (10, int(
        (130 + 0.133 * 28 * 10) * 2**20))
    assert graphs("--cudagraph-capture-sizes", "1,2,4,8")[0] == 8
    code, _, err = run(capsys, "size", "qwen2.5-1.5b-instruct", "--gpu", "l4",
                       "--cudagraph-capture-sizes", "1,x")
    assert code == 2 and "--cudagraph-capture-sizes" in err


def test_moe_backend_flag_sets_the_kept_scratch(capsys):
    # DeepSeek-R1 at TP8 on an H200, 0.18: Triton's kept buffers are 8,192 tokens x top-8 x
    # (7,168 + 7,168) bf16 elements; FlashInfer CUTLASS keeps one 8,192 x 7,168 buffer, which
    # its output reuses (`FusedMoEModularKernel._allocate_buffers`)
    def sized(*flags):
        code, out, err = run(capsys, "size", "deepseek-ai/DeepSeek-R1", "--gpu", "h200",
                             "-tp", "8", "--vllm-version", "0.18", "--json", *flags)
        return code, (json.loads(out) if out else None), err

    _, auto, _ = sized()
    assert (auto["moe_kernel"], auto["moe_workspace_bytes"]) == ("modular",
                                                                 8192 * 8 * 14336 * 2)
    _, fi, _ = sized("--moe-backend", "flashinfer_cutlass")
    assert (fi["moe_kernel"], fi["moe_workspace_bytes"]) == ("flashinfer", 8192 * 7168 * 2)
    assert fi["activation_bytes"] - auto["activation_bytes"] == (
        fi["moe_workspace_bytes"] - auto["moe_workspace_bytes"])
    code, _, err = sized("--moe-backend", "nope")
    assert code == 2 and "--moe-backend nope" in err
    code, _, err = run(capsys, "size", "deepseek-ai/DeepSeek-R1", "--gpu", "h200", "-tp", "8",
                       "--vllm-version", "0.16", "--moe-backend", "triton")
    assert code == 2 and "0.18+" in err
    _, dense, _ = run(capsys, "size", "qwen2.5-1.5b-instruct", "--gpu", "l4", "--json")
    assert json.loads(dense)["moe_kernel"] is None


def test_mm_encoder_tp_mode_data_keeps_the_tower_whole(capsys):
    # `--mm-encoder-tp-mode data` hosts the full vision tower on every rank (Qwen VL supports it)
    def w(*flags):
        code, out, err = run(capsys, "size", "Qwen/Qwen3-VL-30B-A3B-Instruct", "--gpu", "h200",
                             "-tp", "4", "--json", *flags)
        assert code == 0, err
        return json.loads(out)["weights_bytes_per_gpu"]

    tower = w("--mm-encoder-tp-mode", "data") - w()
    assert 0.2 * 2**30 < tower < 1.2 * 2**30  # 3/4 of a ~0.8 GiB tower comes back per rank
    code, _, err = run(capsys, "size", "Qwen/Qwen3-VL-30B-A3B-Instruct", "--gpu", "h200",
                       "--mm-encoder-tp-mode", "both")
    assert code == 2 and "--mm-encoder-tp-mode both" in err


def test_frontend_multimodal_decoding_comes_out_of_the_kv_cache(capsys):
    """vLLM 0.25+ `reserve_mm_ipc_gpu_memory`: after "Available KV cache memory" is logged
    (here given), the raw-frame budget and the GPU video decoders' reservation are taken out of
    what the KV cache gets, on the --kv-cache-memory-bytes path too."""
    base = ("size", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "h100", "--max-model-len", "32768",
            "--kv-cache-memory-bytes", "40G", "--json")
    page = 28 * 2 * 4 * 128 * 2 * 16  # 28 layers, 4 KV heads of 128, bf16, 16-token blocks
    code, out, err = run(capsys, *base, "--mm-ipc-gpu-memory-gb", "2")
    assert code == 0, err
    d = json.loads(out)
    assert d["available_kv_bytes"] == 40 * 2**30  # the logged figure is unchanged
    assert d["frontend_mm_reserved_bytes"] == 2 * 2**30
    assert d["kv_pool_bytes"] == 38 * 2**30
    assert d["num_gpu_blocks"] == 38 * 2**30 // page == 44470
    # PyNvVideoCodec on the GPU, vllm serve -dp 2 (two API servers by default), 0.33:
    # 2 x (2 decoders x 128 MiB + 1.8 GiB CUDA context), a 7680 x 4320 limit raising a
    # decoder to 7680 x 4320 x 3 B x 2 surfaces
    video = '{"video": {"video_backend": "pynvvideocodec", "max_width": 7680, "max_height": 4320}}'
    code, out, err = run(capsys, *base, "-dp", "2", "--media-io-kwargs", video)
    assert code == 0, err
    ctx = int(1.8 * 1024 * 2**20)
    assert json.loads(out)["frontend_mm_reserved_bytes"] == 2 * (2 * 7680 * 4320 * 6 + ctx)
    # 0.27: decoders of 128 MiB whatever the limit; --api-server-count 1 overrides the DP size
    code, out, err = run(capsys, *base, "-dp", "2", "--api-server-count", "1",
                         "--media-io-kwargs", video, "--vllm-version", "0.27")
    assert json.loads(out)["frontend_mm_reserved_bytes"] == 2 * 128 * 2**20 + ctx
    # a text-only model has no multimodal config: nothing is reserved
    code, out, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100",
                         "--mm-ipc-gpu-memory-gb", "2", "--json")
    assert json.loads(out)["frontend_mm_reserved_bytes"] == 0


def test_frontend_reservation_bad_input_and_refusal(capsys):
    code, _, err = run(capsys, "size", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "h100",
                       "--mm-ipc-gpu-memory-gb", "2", "--vllm-version", "0.24")
    assert code == 2 and "no --mm-ipc-gpu-memory-gb" in err and "0.25" in err
    code, _, err = run(capsys, "size", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "h100",
                       "--media-io-kwargs", '{"video": {"backend": "pynvvideocodec", '
                       '"hw_decoders": 0}}')
    assert code == 2 and "hw_decoders 0" in err and "Traceback" not in err
    # vLLM raises when the reservation leaves nothing for the KV cache
    code, out, err = run(capsys, "size", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "l4",
                         "--max-model-len", "4096", "--mm-ipc-gpu-memory-gb", "16")
    assert code == 1
    assert "multimodal decoding reserves 16.00 GiB" in out + err


@pytest.mark.parametrize("argv", [
    ("size", "llama-3.1-8b", "--gpu", "h100", "--cpu-offload-gb", "nan"),
    ("size", "qwen2.5-vl-7b", "--gpu", "h100", "--mm-ipc-gpu-memory-gb", "inf"),
    ("recommend", "llama-3.1-8b", "--gpu", "h100", "--workload", "chat", "--rate", "nan"),
    ("simulate", "llama-3.1-8b", "--gpu", "h100", "--workload", "chat", "--rate", "-inf"),
])
def test_non_finite_numbers_are_bad_input(capsys, argv):
    code, _, err = run(capsys, *argv)
    assert code == 2 and "is not a finite number" in err and err.count("\n") == 1


def test_absurd_rates_are_refused_not_hung(capsys):
    """A rate in requests per minute or per day typed as per second: found by fuzzing plan
    files (1e308 overflowed the queueing maths) and the simulator (1e12 req/s never ended)."""
    code, _, err = run(capsys, "recommend", "llama-3.1-8b", "--gpu", "h100", "--workload",
                       "chat", "--rate", "1e12")
    assert code == 1 and "needs more than 1,000,000 replicas" in err  # no deployment meets it
    code, _, err = run(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--workload",
                       "chat", "--rate", "1e12")
    # 300 s of arrivals by default
    assert code == 2 and "simulates 300,000,000,000,000 requests" in err
    code, _, err = run(capsys, "simulate", "llama-3.1-8b", "--gpu", "h100", "--workload",
                       "chat", "--requests", "1000001")
    assert code == 2 and "at most 1,000,000" in err


def test_help_shows_defaults_without_markup_escapes(capsys):
    """typer escapes '[default: 1]' for rich even when help is rendered without it."""
    code, out, _ = run(capsys, "size", "--help")
    assert code == 0 and "[default: 1]" in out and "\\[" not in out


def test_compilation_config_capture_size_must_be_an_integer(capsys):
    """A non-integer max_cudagraph_capture_size in -cc was an internal error (int('x'))."""
    code, _, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "-cc",
                       '{"max_cudagraph_capture_size": "x"}')
    assert code == 2 and "max_cudagraph_capture_size must be an integer, got 'x'" in err
    code, out, _ = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "--json", "-cc",
                       '{"max_cudagraph_capture_size": "64"}')
    assert code == 0 and json.loads(out)["cudagraph_graphs"] == 22


def test_allow_long_max_model_len_lets_the_length_past_the_config(capsys):
    argv = ["size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h200", "--max-model-len",
            "262144"]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "--env VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in err
    code, out, err = run(capsys, *argv, "--env", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=true", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["max_model_len"] == 262144
    # 2 x 8 KV heads x 128 x 2 B x 32 layers a token; a request is 16,384 blocks of 16
    assert d["kv_bytes_per_token"] == 131072
    assert d["max_concurrency"] == round(d["num_gpu_blocks"] / 16384, 2)


@pytest.mark.parametrize("extra, says", [
    # `get_valid_backends` (0.21+ dense): every backend takes multiples of 16 only
    (["--block-size", "8"], "no attention backend for --block-size 8"),
    # `LLM.__init__` (0.11.1+): no data parallelism in one process
    (["-dp", "2", "--entrypoint", "llm"], "LLM class refuses data_parallel_size 2"),
    (["--num-gpu-blocks-override", "0"], "no free block to start with"),
    (["--limit-mm-per-prompt", '{"image": -1}'], "image = -1 is negative"),
    # `VllmConfig._set_cudagraph_sizes` / `create_engine_config` (0.11.1+)
    (["--cudagraph-capture-sizes", "1,2,4,8", "--max-cudagraph-capture-size", "64"],
     "largest kept is 8"),
    (["-cc", '{"max_cudagraph_capture_size": 64}', "--max-cudagraph-capture-size", "128"],
     "mutually exclusive"),
    # `SpeculativeConfig`: ngram bounds; a draft model of another vocabulary (0.15+)
    (["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3, '
      '"prompt_lookup_min": 5, "prompt_lookup_max": 2}'], "prompt_lookup_min=5 must be <="),
    (["--speculative-config", '{"model": "meta-llama/Llama-3.2-1B-Instruct", '
      '"num_speculative_tokens": 3}'], "differs from the target's (151936)"),
])
def test_start_up_refusals_are_one_line_and_exit_2(capsys, extra, says):
    code, _, err = run(capsys, "size", "Qwen/Qwen3-8B", "--gpu", "h100", *extra)
    assert code == 2 and says in err and "Traceback" not in err


def test_refusals_that_depend_on_the_model_or_release(capsys):
    # 16-bit experts: `map_unquantized_backend` has no DeepGEMM; 0.33's TRT-LLM bf16 kernel
    # runs on the SM100 family only
    code, _, err = run(capsys, "size", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "--moe-backend",
                       "deep_gemm")
    assert code == 2 and "for 16-bit experts" in err
    code, _, err = run(capsys, "size", "Qwen/Qwen3-30B-A3B", "--gpu", "h100", "--moe-backend",
                       "flashinfer_trtllm")
    assert code == 2 and "B200/B300 family only" in err
    # no CUDA MLA backend lists fp8_e5m2 (0.12+)
    code, _, err = run(capsys, "size", "deepseek-ai/DeepSeek-V2-Lite", "--gpu", "h100",
                       "--kv-cache-dtype", "fp8_e5m2")
    assert code == 2 and "no MLA attention backend" in err
    # 0.18-0.20 fall back to FlexAttention for a block of 8, and start
    code, _, _ = run(capsys, "size", "Qwen/Qwen3-8B", "--gpu", "h100", "--block-size", "8",
                     "--vllm-version", "0.20")
    assert code == 0
    # a draft model runs at the target's TP (0.15+)
    code, _, err = run(capsys, "size", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "h100",
                       "-tp", "4", "--speculative-config",
                       '{"model": "meta-llama/Llama-3.2-1B-Instruct", '
                       '"num_speculative_tokens": 3, "draft_tensor_parallel_size": 1}')
    assert code == 2 and "at the target's TP only" in err


def test_kv_cache_memory_bytes_zero_profiles_as_unset(capsys):
    # `if kv_cache_memory_bytes := ...`: 0 is falsy, so vLLM profiles as usual
    base = run(capsys, "size", "Qwen/Qwen3-8B", "--gpu", "h100", "--json")
    zero = run(capsys, "size", "Qwen/Qwen3-8B", "--gpu", "h100", "--json",
               "--kv-cache-memory-bytes", "0")
    assert zero[0] == 0
    assert json.loads(zero[1])["kv_cache_tokens"] == json.loads(base[1])["kv_cache_tokens"]


@pytest.mark.parametrize("argv, says", [
    # every ROCm attention backend takes multiples of 16 from 0.18 (`get_valid_backends`)
    (["Qwen/Qwen3-8B", "--gpu", "mi300x", "--block-size", "8", "--vllm-version", "0.19"],
     "no attention backend for --block-size 8"),
    # the ROCm MoE kernels: no FlashInfer / DeepGEMM / CUTLASS / Marlin, AITER only with
    # VLLM_ROCM_USE_AITER=1 (`_supports_current_device`)
    (["Qwen/Qwen3-30B-A3B", "--gpu", "mi300x", "--moe-backend", "flashinfer_cutlass"],
     "on ROCm has no flashinfer_cutlass MoE kernel"),
    (["Qwen/Qwen3-30B-A3B", "--gpu", "mi300x", "--moe-backend", "aiter"],
     "with VLLM_ROCM_USE_AITER=1"),
    (["Qwen/Qwen3-30B-A3B", "--gpu", "h100", "--moe-backend", "aiter"],
     "runs only on ROCm MI300-class GPUs"),
    # `map_mxfp4_backend` has no cutlass
    (["openai/gpt-oss-120b", "--gpu", "h100", "--moe-backend", "cutlass"],
     "no cutlass kernel for MXFP4 experts"),
    # 0.20-0.30 refuse AITER's 16-bit MoE on a CDNA2 GPU
    (["deepseek-ai/DeepSeek-V2-Lite", "--gpu", "mi250x", "--vllm-version", "0.25",
      "--max-model-len", "32768", "--env", "VLLM_ROCM_USE_AITER=1"],
     "refuses VLLM_ROCM_USE_AITER=1 for 16-bit experts"),
])
def test_rocm_and_moe_kernel_refusals(capsys, argv, says):
    code, _, err = run(capsys, "size", *argv)
    assert code == 2 and says in err


def test_rocm_choices_vllm_makes_for_you(capsys):
    def tokens(*argv):
        code, out, err = run(capsys, "size", *argv, "--json")
        assert code == 0, err
        return json.loads(out)

    # AITER on MI250X does nothing from 0.19 (`is_aiter_found_and_supported`: MI300-class)
    base = ["deepseek-ai/DeepSeek-V2-Lite", "--gpu", "mi250x", "--vllm-version", "0.19",
            "--max-model-len", "32768"]
    assert tokens(*base)["kv_cache_tokens"] == tokens(
        *base, "--env", "VLLM_ROCM_USE_AITER=1")["kv_cache_tokens"]
    # AITER MLA takes any block size
    assert tokens("deepseek-ai/DeepSeek-V2-Lite", "--gpu", "mi300x", "--block-size", "8",
                  "--env", "VLLM_ROCM_USE_AITER=1")["block_size"] == 8
    # gpt-oss: --moe-backend triton is OpenAI's Triton MXFP4 kernel, the one auto picks
    auto = tokens("openai/gpt-oss-120b", "--gpu", "h100")
    tri = tokens("openai/gpt-oss-120b", "--gpu", "h100", "--moe-backend", "triton")
    assert tri["kv_cache_tokens"] == auto["kv_cache_tokens"]
    assert tri["moe_workspace_bytes"] == 8192 * 4 * 2880 * 2 + 8192 * 2880 * 2 == 235929600
    # 0.25's ROCM_AITER_UNIFIED_ATTN lists no fp8_e5m2: gpt-oss falls to Triton's 16 blocks
    r = tokens("openai/gpt-oss-20b", "--gpu", "mi300x", "--vllm-version", "0.25",
               "--kv-cache-dtype", "fp8_e5m2", "--kv-cache-memory-bytes", "10G",
               "--max-model-len", "32768")
    assert r["block_size"] == 16


def test_forced_attention_backends(capsys):
    def run_json(*argv):
        code, out, err = run(capsys, "size", *argv, "--json")
        assert code == 0, err
        return json.loads(out)

    r1 = ["deepseek-ai/DeepSeek-R1", "-tp", "8"]
    # TRITON_MLA on an H200 reserves its split-KV decode logits in 0.33's profile: 1,024 x
    # 16 heads x min(512, 2 x 132 SMs) splits x 513 x 4 B = 8.27 GiB, less the MoE scratch
    # the workspace already holds
    assert run_json(*r1, "--gpu", "h200")["kv_cache_tokens"] == 650336
    forced = run_json(*r1, "--gpu", "h200", "--attention-backend", "TRITON_MLA")
    assert (forced["kv_cache_tokens"], forced["block_size"]) == (550768, 16)
    # CUTLASS-MLA's 128-token blocks on a B200 (the default FlashInfer-MLA takes 32)
    assert run_json(*r1, "--gpu", "b200", "--attention-backend",
                    "CUTLASS_MLA")["block_size"] == 128
    # FlashMLA-sparse stores fp8 as fp8_ds_mla (656 B a token and layer, not 576); with
    # V3.2's two fp32 rope caches (80 MiB) and 64 MiB top-k index buffer
    v32 = run_json("deepseek-ai/DeepSeek-V3.2", "--gpu", "b200", "-tp", "8",
                   "--kv-cache-dtype", "fp8", "--attention-backend", "FLASHMLA_SPARSE")
    assert (v32["kv_cache_dtype"], v32["kv_cache_tokens"]) == ("fp8_ds_mla", 1665728)
    # a backend that does not fit the model or GPU is refused, as 0.11.1+ refuse it
    for argv, says in ((["Qwen/Qwen3-8B", "--gpu", "h100", "--attention-backend", "FLASHMLA"],
                        "non-MLA not supported"),
                       ([*r1, "--gpu", "h100", "--attention-backend", "CUTLASS_MLA"],
                        "compute capability not supported"),
                       (["Qwen/Qwen3-8B", "--gpu", "h100", "--attention-backend",
                         "FLEX_ATTENTION", "--kv-cache-dtype", "fp8"],
                        "kv_cache_dtype not supported"),
                       ([*r1, "--gpu", "h200", "--vllm-version", "0.12",
                         "--attention-backend", "TRITON_MLA"], "no --attention-backend")):
        code, _, err = run(capsys, "size", *argv)
        assert code == 2 and says in err, argv
    # 0.11-0.14 read VLLM_ATTENTION_BACKEND (Triton-MLA keeps 16-token blocks, and takes no
    # full graphs before 0.22); 0.15+ ignore it
    old = run_json(*r1, "--gpu", "h200", "--vllm-version", "0.13", "--env",
                   "VLLM_ATTENTION_BACKEND=TRITON_MLA")
    assert (old["block_size"], old["cudagraph_mode"]) == (16, "PIECEWISE")
    assert run_json(*r1, "--gpu", "h200", "--vllm-version", "0.16", "--env",
                    "VLLM_ATTENTION_BACKEND=TRITON_MLA")["block_size"] == 64


def test_num_gpu_blocks_override_past_the_gpu_does_not_fit(capsys):
    # vLLM allocates the override's blocks whatever the profile found, so 40,000 blocks of
    # 2 MiB beside Llama-3.1-8B on an H100 run out of memory (a helper's reading of 0.33):
    # exit 1 naming the most that fit
    code, out, _ = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100",
                       "--num-gpu-blocks-override", "40000", "--offline")
    assert code == 1 and "--num-gpu-blocks-override 40,000 needs 78.12 GiB" in out
    assert "31,016 blocks at most" in out


def test_pooling_runner_has_no_lm_head_sampler_or_full_graphs(capsys):
    # `--runner pooling` (Qwen3-Embedding-8B has Qwen3-8B's shapes): no LM head
    # (`no_init_weights`: 151,936 x 4,096 x 2 B), no sampler or V2 sampler state, PIECEWISE
    # graphs only ("Pooling models do not support full cudagraphs"); the forward stays
    def j(*extra):
        code, out, _ = run(capsys, "size", "Qwen/Qwen3-8B", "--gpu", "h100", "--json",
                           "--max-model-len", "32768", *extra)
        return json.loads(out)

    gen, pool = j(), j("--runner", "pooling")
    assert gen["weights_bytes_per_gpu"] - pool["weights_bytes_per_gpu"] == 151936 * 4096 * 2
    assert pool["sampler_state_bytes"] == 0 and pool["cudagraph_mode"] == "PIECEWISE"
    # the forward at 8,192 tokens (872,415,232 B) + the fixed 64 + 450 MiB terms
    assert pool["activation_bytes"] == 872_415_232 + (64 + 450) * 2**20
    assert (gen["kv_cache_tokens"], pool["kv_cache_tokens"]) == (390_624, 414_592)
    assert j("--convert", "embed")["kv_cache_tokens"] == 414_592
    # MEAN / CLS pooling turns chunked prefill off: the budget covers a prompt (32,768)
    mean = j("--runner", "pooling", "--pooler-config", '{"seq_pooling_type": "MEAN"}')
    assert (mean["max_num_batched_tokens"], mean["kv_cache_tokens"]) == (32768, 396_848)
    # encoder-only attention keeps no KV cache: nothing to plan (exit 2, one line)
    code, _, err = run(capsys, "size", "Qwen/Qwen3-8B", "--gpu", "h100", "--runner", "pooling",
                       "--hf-overrides", '{"is_causal": false}')
    assert code == 2 and "encoder-only attention" in err


def test_bert_family_is_encoder_only(capsys, tmp_path):
    # no BERT config says is_causal: vLLM's bert.py / roberta.py build ENCODER_ONLY attention
    for arch, mtype in (("BertModel", "bert"),
                        ("XLMRobertaForSequenceClassification", "xlm-roberta")):
        f = tmp_path / f"{arch}.json"
        f.write_text(json.dumps({
            "architectures": [arch], "model_type": mtype, "hidden_size": 384,
            "num_attention_heads": 12, "num_hidden_layers": 12, "intermediate_size": 1536,
            "max_position_embeddings": 512, "vocab_size": 30522, "torch_dtype": "float32"}))
        code, out, err = run(capsys, "size", str(f), "--gpu", "l4")
        assert code == 2 and out == "" and err.startswith(
            f"kvplan: error: {arch} is an encoder-only model (vLLM builds its attention as "
            "ENCODER_ONLY): vLLM keeps no KV cache for it"), err
    # gte-*-v1.5's own config: Alibaba's remote NewModel, which vLLM serves as GteNewModel
    # (its auto_map names the remote code, so vLLM's registry check would try the Transformers
    # backend rather than refuse the name outright)
    f = tmp_path / "gte.json"
    f.write_text(json.dumps({
        "auto_map": {"AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
                     "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel"},
        "architectures": ["NewModel"], "model_type": "new", "hidden_size": 1024,
        "num_attention_heads": 16, "num_hidden_layers": 24, "intermediate_size": 4096,
        "max_position_embeddings": 8192, "vocab_size": 30528, "torch_dtype": "float32"}))
    code, out, err = run(capsys, "size", str(f), "--gpu", "l4")
    assert code == 2 and "vLLM serves it as GteNewModel" in err and "--hf-overrides" in err


def test_pooling_review_rules(capsys):
    def j(model, *extra):
        code, out, err = run(capsys, "size", model, "--gpu", "h100", "--json", *extra)
        return code, (json.loads(out) if out else None), err

    # pooling models schedule synchronously by default (`VllmConfig.__post_init__`), which
    # sliding-window layers' in-flight blocks see
    _, pool, _ = j("google/gemma-3-4b-it", "--runner", "pooling", "--max-model-len", "8192")
    _, sync, _ = j("google/gemma-3-4b-it", "--runner", "pooling", "--max-model-len", "8192",
                   "--no-async-scheduling")
    assert pool["kv_cache_tokens"] == sync["kv_cache_tokens"]
    # tied embeddings at PP2: the last stage's head copy is not built either
    _, gen2, _ = j("Qwen/Qwen3-4B", "-pp", "2", "--max-model-len", "8192")
    _, pool2, _ = j("Qwen/Qwen3-4B", "-pp", "2", "--max-model-len", "8192", "--runner", "pooling")
    last = [s["weights_bytes"] for s in gen2["pipeline_stages"]][-1] - \
        [s["weights_bytes"] for s in pool2["pipeline_stages"]][-1]
    assert last == 151936 * 2560 * 2
    # `ConvertType` lost "reward" in 0.16; --runner arrived in 0.10.1
    code, _, err = j("Qwen/Qwen3-8B", "--convert", "reward")
    assert code == 2 and "--convert 'reward'" in err
    assert j("Qwen/Qwen3-8B", "--convert", "reward", "--vllm-version", "0.15")[0] == 0
    code, _, err = j("Qwen/Qwen3-8B", "--runner", "pooling", "--vllm-version", "0.10.0")
    assert code == 2 and "no --runner" in err


def test_kv_sharing_fast_prefill_buffers(capsys):
    # `Gemma4Model.__init__` with the flag: int64 positions, [N, hidden] and [N, layers, ple]
    # for N = max_num_batched_tokens (L4: 2,048); Gemma 4 E2B: hidden 1,536, 35 layers x 256
    def j(*extra):
        code, out, _ = run(capsys, "size", "google/gemma-4-E2B", "--gpu", "l4", "--json", *extra)
        return json.loads(out)

    off, on = j(), j("--kv-sharing-fast-prefill")
    n = 2048
    assert on["weights_bytes_per_gpu"] - off["weights_bytes_per_gpu"] == \
        n * 8 + n * 1536 * 2 + n * 35 * 256 * 2
    assert (off["kv_cache_tokens"], on["kv_cache_tokens"]) == (1_337_242, 1_330_697)
    code, _, err = run(capsys, "size", "google/gemma-4-E2B", "--gpu", "l4",
                       "--kv-sharing-fast-prefill", "--speculative-config",
                       '{"method": "eagle3", "model": "google/gemma-4-E2B", '
                       '"num_speculative_tokens": 2}')
    assert code == 2 and "EAGLE-style" in err


def test_v0_chunked_budget_was_512_before_0_6_5(capsys):
    # 0.6.0-0.6.4.post1 `SchedulerConfig.__init__`: 512 with chunked prefill (2,048 from 0.6.5);
    # without chunked prefill max(max_model_len, 2048) in every 0.6
    def mnbt(version, *extra):
        code, out, err = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                             "--max-model-len", "8192", "--vllm-version", version, "--json",
                             *extra)
        return json.loads(out)["max_num_batched_tokens"]

    assert mnbt("0.6.0", "--enable-chunked-prefill") == 512
    assert mnbt("0.6.4.post1", "--enable-chunked-prefill") == 512
    assert mnbt("0.6.5", "--enable-chunked-prefill") == 2048
    assert mnbt("0.6.0") == 8192


def _kvplan(*args, shell_tail="", env=None):
    """`python -m kvplan ARGS` in a shell (for redirections): (exit code, stdout, stderr)."""
    import os
    import shlex
    import subprocess
    import sys

    cmd = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "kvplan", *args))
    r = subprocess.run(["sh", "-c", f"{cmd} {shell_tail}"], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, check=False)
    return r.returncode, r.stdout, r.stderr


def test_output_that_cannot_be_written(tmp_path):
    """review 24b F1/F7/F8: a reader that went away, a full disk, closed streams and an
    encoding without the box characters; never an internal error."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "kvplan", "size", "llama-3.1-8b", "--gpu",
                          "h100"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # the reader goes away before anything is written (`| true`)
    assert p.wait() == 141 and p.stderr.read() == b""
    p = subprocess.Popen([sys.executable, "-m", "kvplan", "models"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)  # Rich's table, through typer
    p.stdout.close()
    assert p.wait() == 141 and p.stderr.read() == b""
    code, _, err = _kvplan("size", "llama-3.1-8b", "--gpu", "h100", shell_tail=">/dev/full")
    assert code == 74 and err == "kvplan: error: cannot write the output: No space left on " \
        "device\n"
    code, _, _ = _kvplan("size", "llama-3.1-8b", "--gpu", "h100", shell_tail=">&-")
    assert code == 0
    code, _, _ = _kvplan("size", "nope", "--gpu", "h100", shell_tail="2>&-")
    assert code == 2  # was 1: the error line itself failed
    code, out, _ = _kvplan("size", "llama-3.1-8b", "--gpu", "h100",
                           env={"PYTHONIOENCODING": "ascii"})
    assert code == 0 and "KV cache pool     54.39 GiB  ??" in out


def test_extreme_values_and_unreadable_paths_are_bad_input(capsys, monkeypatch):
    """review 24b F2/F6: exit 2 with one line, not an internal error."""
    code, _, err = run(capsys, "size", "a" * 300, "--gpu", "h100")
    assert code == 2 and err.endswith(": File name too long\n")
    code, _, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "--cpu-offload-gb",
                       "1e308")
    assert code == 2 and err.startswith("kvplan: error: a value given is too large to compute "
                                        "with (OverflowError")

    # a 10^9 capture size listed 62.5 M graph sizes (11 GB) before failing
    code, _, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100",
                       "--max-cudagraph-capture-size", "1000000000")
    assert code == 2 and err == ("kvplan: error: --max-cudagraph-capture-size 1,000,000,000 "
                                 "asks vLLM to capture about 62,500,000 CUDA graphs at "
                                 "start-up, tens of milliseconds each (give at most "
                                 "1,048,576; vLLM's default is 512)\n")
    # session 28's CLI fuzz: a 10^26-token budget printed a 10^19 TiB activation peak
    code, _, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100",
                       "--max-num-batched-tokens", str(2**31))
    assert code == 2 and err == ("kvplan: error: --max-num-batched-tokens 2,147,483,648 is "
                                 "more than vLLM indexes: a batch's tokens and requests are "
                                 "counted in int32 (give at most 2,147,483,647)\n")
    code, _, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "--ubatch-size", "-1")
    assert code == 2 and err == ("kvplan: error: --ubatch-size must be 0 or more, got -1 "
                                 "(vLLM's ParallelConfig refuses it) (give 0 (no "
                                 "microbatching) or the microbatches per step)\n")
    code, _, err = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100", "--ubatch-size", "2",
                       "--vllm-version", "0.12")
    assert code == 2 and "vLLM 0.12 has no --ubatch-size (0.14+" in err
    # a pool just under the null block printed "only -0.00 GiB is available"
    code, out, _ = run(capsys, "size", "llama-3.1-8b", "--gpu", "h100",
                       "--kv-cache-memory-bytes", "1")
    assert code == 1 and "but only 0.00 GiB is available" in out

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied", "/srv/models/llama")

    monkeypatch.setattr("kvplan.sources.resolve.resolve_model", denied)
    code, _, err = run(capsys, "size", "/srv/models/llama", "--gpu", "h100")
    assert (code, err) == (2, "kvplan: error: cannot access /srv/models/llama: Permission "
                              "denied\n")


def test_no_command_prints_the_help_not_an_error(capsys):
    """`kvplan` alone: the usage and command list on stderr, exit 2, without the
    "kvplan: error:" prefix (it was "kvplan: error: Usage: ...")."""
    code, out, err = run(capsys)
    assert code == 2 and out == ""
    assert err.startswith("Usage: kvplan [OPTIONS] COMMAND [ARGS]...") and "size " in err
    code, _, err = run(capsys, "size")
    assert code == 2 and err == "kvplan: error: Missing argument 'MODEL'.\n"


def test_lengths_of_zero_are_bad_input(capsys, tmp_path):
    """A config whose length is 0 (vLLM would derive max_model_len 0) and a vision config whose
    dummy item has no tokens are one line of bad input, not a start of 0 tokens or exit 3
    (review 25i)."""
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
           "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 0}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, _, err = run(capsys, "size", str(tmp_path / "config.json"), "--gpu", "h100")
    assert code == 2 and "'max_position_embeddings' is 0" in err


def test_recommend_a_kv_dtype_refused_everywhere_is_bad_input(capsys):
    # 0.33 refuses a 16-bit cache unlike the model's on every GPU: bad input (exit 2) with the
    # fix, not "no deployment meets the targets ... allow more GPUs" (review 25i)
    # (with --gpu any a V100 or T4, whose model dtype is float16, would take it)
    code, _, err = run(capsys, "recommend", "meta-llama/Llama-3.1-8B-Instruct", "--gpu",
                       "h100,b200", "-tp", "auto", "--workload", "chat", "--rate", "5",
                       "--kv-cache-dtype", "float16")
    assert code == 2 and "refuses --kv-cache-dtype float16" in err and "auto or bfloat16" in err
    # a dtype refused on this GPU only is still "does not fit" (another GPU may run it)
    code, _, err = run(capsys, "recommend", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "t4",
                       "--workload", "chat", "--rate", "5", "--kv-cache-dtype", "nvfp4")
    assert code == 1 and "no deployment meets the targets" in err


def test_spellings_vllm_refuses(capsys):
    # argparse's --kv-cache-dtype choices are lower-case; a Qwen VL dummy of aspect ratio over
    # 200 makes the processor's smart_resize raise in the profile run (review 25i)
    code, _, err = run(capsys, "size", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100",
                       "--kv-cache-dtype", "FP8")
    assert code == 2 and "use --kv-cache-dtype fp8" in err
    code, _, err = run(capsys, "size", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "l40s",
                       "--limit-mm-per-prompt", '{"video": {"count": 1, "width": 10}}')
    assert code == 2 and "aspect ratio over 200" in err
