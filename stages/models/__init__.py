"""Model backends the stages and agents use, each loaded on first use (once per worker): the LLM
layer (`llm`), image-text embedders (`embedders`), the shipped vision models (`vision`) and frame
describers (`describers`). They know nothing of stages, the pipeline or Ray."""
