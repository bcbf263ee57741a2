/* SPDX-License-Identifier: MIT */
/*
 * bip39-words.h: the BIP-39 mnemonic word lists (2048 words each) as NUL-separated UTF-8
 * (NFC) blobs, generated into bip39-words.c by tools/gen-bip39.py. credential.c hashes them
 * once, for the seed-phrase detector.
 */
#pragma once

#define BIP39_WORDS 2048

extern const char bip39_english[];
extern const char bip39_italian[];
extern const char bip39_spanish[];
