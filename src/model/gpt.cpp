void tern_model_placeholder() {}
