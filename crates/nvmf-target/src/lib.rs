//! nvmf-target
