//! Fixed vectors for the DH-HMAC-CHAP computations, computed by an independent
//! implementation of Linux's algorithm (drivers/nvme/common/auth.c, host/auth.c) in
//! Python's hashlib/hmac and pow(); the interop test with the Linux host
//! (crates/ferrobay/tests/dhchap_guest.rs) checks the same code against the kernel.

use super::crypto::*;
use super::*;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:a0b1c2d3-0000-4000-8000-000000000001";
const SUB: &str = "nqn.2026-01.io.ferrobay:vectors";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const TRANSFORMED_HOST_KEY_SHA256: &str =
    "e4eadc9c512f9e74df96ffd18a29cdb4df1c032a7c39e75fb9d81d3aad2de866";
const TRANSFORMED_CTRL_KEY_SHA384: &str = concat!(
    "bb403bbb1f45e308c3e581d289cf4727a8cfb1fb86959b2a7eba6dd4d9c2e99c",
    "0dc8ad6cdf73aa3458633f56fc5cc8e3",
);
const HOST_RESPONSE_NULL_SHA256: &str =
    "cdd53533389aaea7263cbea7d9381dadd07a7d60dd666ae63fa3fa6207389927";
const CTRL_RESPONSE_NULL_SHA384: &str = concat!(
    "4bd13d188b78e04bdabd26f4c41baacdad963edb5f9960e9c469bc39076893eb",
    "d9ffa7fe100f2365e0590af16b79e936",
);
const FFDHE2048_PUBLIC_7: &str = concat!(
    "2578f1ebe48a72b7df2002675c331a0f79979ac04f87a1255061a54c6659f612",
    "a31052d589c3dd977500b8a4b69302466a737a7f98c7ed73c26a5987dd4e166d",
    "9446600e628097c8768a37ac74bf2bb78fa326add321b1b7946651d3dda16fb7",
    "82480247222985c2f59114dabed780b40cbb69954b47d705618f2dc85239c703",
    "72b1ce639303c7d85adf65a2b9389d1aea1c91b40a677b5c55ac5d2d6a2f015d",
    "3ac1db699ab7136f90ccb419d38b99b8d0fa9222a936d28e9516b0dc3c12d208",
    "aa4a368bea912839e6cafecd705179ed699b8a8dd3a3740fcf81b5a084018966",
    "cc29b5eb3558518902f8c01a671462163cf915be2334415de200a43b0712480c",
);
const FFDHE2048_PUBLIC_9: &str = concat!(
    "e6badd41bcaa38d417514e29d6243e016f4b05e48b00d023ba7f3c0e279bb255",
    "882b1b85e1ede5574480bbabeb4c22f9cd05b35d7c352a19b6f0efe2c375a9b2",
    "cf325e79879fb6e7531f7b499cc9be412233b0dd3c682d0304fd7c572ed86d71",
    "669e34f7b878c7529a131a100792e4dd0271a0178d791f5a8e419d7e1be668de",
    "57532f5ea1380b3b447c8bb1ef3b62ddcc6e1df3fd4acc34885536be78da76f3",
    "501093d45d0cd3967be9730b31bdcb15b866158307cbf80448e6dd80fc9aedfe",
    "f94b6de488fd257b017f96fe70dab2c12d941abbe0c0112eb4708629314a2298",
    "cd13e30c72fe36d4739729a6e4e5cc42a21ab78d0824944f884f164f13c50107",
);
const FFDHE2048_SESSION: &str = concat!(
    "9775f3c1b9be99ca80562380a3e37659953bf8c2ee6d5f2cd4bf86ee8a516df1",
    "f322567fdba3acff49f560dc56b343efcdff3fd5424df8b55049647491c3b34b",
    "d6613b88f7ea07e2de3f1abfa19506728bcfdb2de32cd6d477ed6d17b6ff7c6a",
    "4add5ccaa15bdbda10b00c9518a46f6fb44a45ce3e5f7709b1c73ff719f506e5",
    "4b5b744d4c118e12eb10295ddb54e11e0ff12467c12aa7989cfb891cde153366",
    "deec2f76f605b30e9c8357ea4a4e057d0ae0387fe0e8d1273883977205feb6e1",
    "70f8369713ec2fa179985bc5044795e3ed4b3db8428d5ce9865475d971ae33f1",
    "f16c200103f5135cd1e76345d96dbbe6f27039a5d655cc60e837062de7316f86",
);
const AUGMENTED_SHA512: &str = concat!(
    "74d1615002032cf80d2776addb336c54081469e6ef1a6ef6c06ef8374a9f7484",
    "870901fc9cfd66c17f701c4cac54ddd4f6305ea68f7b75fe224fa56121f7bb44",
);
const HOST_RESPONSE_FFDHE2048_SHA512: &str = concat!(
    "55685684d8904f827fb3c7d539aaf08834dead0ecfefb84c8787ea07335c1b2d",
    "c5cb3223cb5e493e67a3de26ef955da64a8b3e034a4a09f54009caac5ab6d3a4",
);

fn range(a: u8, b: u8) -> Vec<u8> {
    (a..b).collect()
}

fn input(seqnum: u32, t_id: u16) -> ResponseInput<'static> {
    ResponseInput {
        seqnum,
        t_id,
        host_nqn: HOST,
        subsys_nqn: SUB,
    }
}

#[test]
fn transformed_keys() {
    let h = DhchapSecret::new(1, &range(0, 32)).unwrap();
    assert_eq!(
        &h.transformed(HOST)[..],
        &unhex(TRANSFORMED_HOST_KEY_SHA256)[..]
    );
    let c = DhchapSecret::new(2, &range(0x40, 0x70)).unwrap();
    assert_eq!(
        &c.transformed(SUB)[..],
        &unhex(TRANSFORMED_CTRL_KEY_SHA384)[..]
    );
    let none = DhchapSecret::new(0, &range(0, 32)).unwrap();
    assert_eq!(&none.transformed(HOST)[..], &range(0, 32)[..]);
}

#[test]
fn responses_with_the_null_group() {
    let kh = DhchapSecret::new(1, &range(0, 32))
        .unwrap()
        .transformed(HOST);
    let r1 = host_response(
        HashId::Sha256,
        &kh,
        &range(0x80, 0xa0),
        &input(0x01020304, 0x0506),
    );
    assert_eq!(&r1[..], &unhex(HOST_RESPONSE_NULL_SHA256)[..]);
    let kc = DhchapSecret::new(2, &range(0x40, 0x70))
        .unwrap()
        .transformed(SUB);
    let r2 = ctrl_response(
        HashId::Sha384,
        &kc,
        &range(0xa0, 0xd0),
        &input(0x0a0b0c0d, 0x0506),
    );
    assert_eq!(&r2[..], &unhex(CTRL_RESPONSE_NULL_SHA384)[..]);
    assert!(responses_equal(&r1, &unhex(HOST_RESPONSE_NULL_SHA256)));
    assert!(!responses_equal(&r1, &r2));
}

#[test]
fn ffdhe2048_exchange_and_augmented_challenge() {
    let a = DhKeyPair::generate(DhGroup::Ffdhe2048, &[7; 64]).unwrap();
    let b = DhKeyPair::generate(DhGroup::Ffdhe2048, &[9; 64]).unwrap();
    assert_eq!(a.public(), &unhex(FFDHE2048_PUBLIC_7)[..]);
    assert_eq!(b.public(), &unhex(FFDHE2048_PUBLIC_9)[..]);
    let ks = a.shared_secret(b.public()).unwrap();
    assert_eq!(&ks[..], &unhex(FFDHE2048_SESSION)[..]);
    let aug = augmented_challenge(HashId::Sha512, &ks, &range(0, 0x40));
    assert_eq!(&aug[..], &unhex(AUGMENTED_SHA512)[..]);
    let key = DhchapSecret::new(0, &range(0x10, 0x50))
        .unwrap()
        .transformed(HOST);
    let r1 = host_response(HashId::Sha512, &key, &aug, &input(77, 1));
    assert_eq!(&r1[..], &unhex(HOST_RESPONSE_FFDHE2048_SHA512)[..]);
}
