"""Optional libraries, imported on first use: transformers, safetensors and huggingface_hub (GPT-2 interop), liger-kernel (a fused head loss).

Training needs none of them; a command that does gets a one-line :class:`UserError` saying what
to install instead of an ImportError traceback.
"""

from __future__ import annotations

from core.errors import UserError


def transformers():
    """The ``transformers`` module, or a one-line :class:`UserError` saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise UserError(
            "GPT-2 import/export needs Hugging Face transformers: pip install transformers safetensors"
        ) from None
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
