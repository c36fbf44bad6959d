#pragma once
// Work that a library cannot interrupt (SentencePiece's trainer) run in a forked child process,
// so that a stop request ends it at once: the parent polls `stop` while it waits and kills the
// child when it turns true. The child runs only `work` and leaves with _exit, so nothing of the
// parent's (its files, its handlers' cleanup) runs twice.
#include <functional>
#include <string>

namespace torchmt {

// `work`'s result, computed in a child process and sent back through a pipe. Throws
// StopRequested ("interrupted while <what>") within about 0.1 s of `stop` returning true (the
// child killed), or when the child itself saw one; std::runtime_error naming `what` with the
// child's message when `work` threw, or when the child died without an answer.
std::string run_in_child_process(const std::function<std::string()>& work, const std::function<bool()>& stop,
                                 const std::string& what);

}  // namespace torchmt
