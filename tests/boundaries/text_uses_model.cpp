// Must not compile: text is below the models and holds no LibTorch (Note [SentencePiece's protobuf]).
#include "ddp/model/model_registry.h"
