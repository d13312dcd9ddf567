"""Optional libraries, imported on first use: transformers, safetensors and huggingface_hub (GPT-2 interop), liger-kernel (a fused head loss).

Training needs none of them; a command that does gets a one-line :class:`UserError` saying what
to install instead of an ImportError traceback.
"""

from __future__ import annotations

from core.errors import UserError

TRANSFORMERS_MAJOR = 5  # the oldest major version whose config.json layout our Llama and Qwen3 folders use


def transformers():
    """The ``transformers`` module, or a one-line :class:`UserError` saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise UserError(
            "GPT-2 import/export needs Hugging Face transformers: pip install transformers safetensors"
        ) from None
    # Version 5 keeps a model's rotary base in config.json's rope_parameters, where our Llama and Qwen3
    # folders write it; 4.x would read 10,000 instead, silently, and has no Qwen3 before 4.51.
    major = int(transformers.__version__.split(".")[0])
    if major < TRANSFORMERS_MAJOR:
        raise UserError(
            f"Hugging Face import/export needs transformers {TRANSFORMERS_MAJOR} or newer, this is "
            f"{transformers.__version__}: pip install 'transformers>={TRANSFORMERS_MAJOR}'"
        )
    transformers.logging.set_verbosity_error()  # its notices and progress bars would break our one-line output
    transformers.logging.disable_progress_bar()
    import huggingface_hub.utils

    huggingface_hub.utils.logging.set_verbosity_error()  # its "Retrying in Ns" lines too
    return transformers


def huggingface_hub():
    """The ``huggingface_hub`` module (it comes with transformers), or a one-line :class:`UserError` saying how to install it."""
    try:
        import huggingface_hub
    except ImportError:
        raise UserError(
            "the model card of a GPT-2 export needs huggingface_hub: pip install transformers safetensors"
        ) from None
    return huggingface_hub


def safetensors_torch():
    """``safetensors.torch``, or a one-line :class:`UserError` saying how to install it."""
    try:
        import safetensors.torch
    except ImportError:
        raise UserError("GPT-2 export needs safetensors: pip install transformers safetensors") from None
    return safetensors.torch


def liger_fused_linear_cross_entropy():
    """Liger-Kernel's ``liger_fused_linear_cross_entropy``, or a one-line :class:`UserError` saying how to install it."""
    try:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy as fused
    except ImportError:
        raise UserError(
            "train.head_loss='fused' needs Liger-Kernel on a CUDA GPU: pip install liger-kernel "
            "(or choose train.head_loss=logits)"
        ) from None
    return fused
