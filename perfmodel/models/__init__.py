"""Transformer models: configs, op graphs per phase, model-level predictions and memory."""

from perfmodel.models.config import TransformerConfig, list_models, load_model

__all__ = ["TransformerConfig", "list_models", "load_model"]
