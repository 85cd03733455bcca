// tests/integration/gpu_texts.h — natural text for the GPU tests
// (test_cuda_e2e, test_cuda_executor): prompts and a passage for teacher
// forcing on the default model.
#pragma once

namespace kvasir::test {

// The default model on natural text: random token ids give it flat
// distributions full of near-ties, where bf16 against the CPU's Q8
// activations decides ties either way (the first GPU run: 2 of 8 greedy
// requests identical and 89% exact top-1 on random ids, every miss a near-tie).
const char* const kTexts[] = {
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea, there lived",
    "To make a cup of tea, first boil the water, then",
    "The three primary colours are",
    "Question: What is 12 times 7?\nAnswer:",
    "Photosynthesis is the process by which plants",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
};

// A longer passage for teacher forcing (~250 tokens).
const char* const kPassage =
    "The history of computing is longer than the history of computing hardware and modern "
    "computing technology and includes the history of methods intended for pen and paper or for "
    "chalk and slate, with or without the aid of tables. Digital computing is intimately tied to "
    "the representation of numbers. But long before abstractions like the number arose, there "
    "were mathematical concepts to serve the purposes of civilization. These concepts are "
    "implicit in concrete practices such as one-to-one correspondence, the basis of counting, "
    "comparison to a standard, used for measurement, and the triangle, used to lay out right "
    "angles when building. The earliest known tool for use in computation was the abacus, and "
    "it was thought to have been invented in Babylon around 2400 BC. Its original style of usage "
    "was by lines drawn in sand with pebbles. Abaci of a more modern design are still used as "
    "calculation tools today. In the seventeenth century, mechanical calculators were built by "
    "Wilhelm Schickard and Blaise Pascal, and Gottfried Leibniz later designed the stepped "
    "reckoner, which could add, subtract, multiply and divide. Charles Babbage conceived of the "
    "analytical engine, a general purpose machine programmed with punched cards.";

}  // namespace kvasir::test
